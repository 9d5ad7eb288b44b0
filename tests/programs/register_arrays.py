"""Memory registration of framework arrays, any element type: a PyTorch bfloat16 CPU tensor, a
numpy bool, complex64 and big-endian array, a bytearray and a DLPack-only producer are registered, and a
put into each from the previous rank in a ring (itself on one rank) lands there byte for byte. What cannot be registered
is refused naming the argument: a JAX array (immutable), a read-only numpy array, GPU memory.
Prints "OK <rank>"."""
import jax.numpy as jnp
import numpy as np
import torch

import forestcc

comm = forestcc.init()
R, N = comm.rank, comm.size
NXT, PRV = (R + 1) % N, (R - 1) % N


class DLPackOnly:  # a producer with DLPack and nothing else
    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


backing = np.zeros(64, np.float32)
arrays = {  # each: the object registered, and a numpy view of its bytes
    "torch bfloat16": (t := torch.zeros(40, dtype=torch.bfloat16), t.view(torch.uint8).numpy()),
    "numpy bool": (b := np.zeros(33, bool), b.view(np.uint8)),
    "numpy complex64": (c := np.zeros(9, np.complex64), c.view(np.uint8)),
    "numpy big-endian": (e := np.zeros(10, ">i4"), e.view(np.uint8)),  # bytes: any order
    "bytearray": (ba := bytearray(50), np.frombuffer(ba, np.uint8)),
    "DLPack only": (DLPackOnly(backing), backing.view(np.uint8)),
}
for name, (obj, raw) in arrays.items():
    # a put of the array's first half from this rank into the second half of the next rank's:
    # the pattern names the sender, so a put that lands short, long or in the wrong array fails
    half = raw.nbytes // 2
    pattern = (np.arange(raw.size) * 7 + len(name)) % 251
    raw[:] = (pattern + R * 31) % 251
    mem = comm.register(obj)
    assert mem.nbytes == raw.nbytes, (name, mem.nbytes, raw.nbytes)
    assert mem.address == raw.ctypes.data, name
    chans = comm.connect([NXT, PRV] if N > 2 else [NXT], mem, tag=len(name))
    comm.barrier()  # every rank's pattern is in place before any put
    chans[0].put(half, 0, half)
    chans[0].signal()
    chans[-1].wait()
    want = np.concatenate([(pattern[:half] + R * 31) % 251, (pattern[:half] + PRV * 31) % 251,
                           (pattern[2 * half:] + R * 31) % 251]).astype(np.uint8)
    assert np.array_equal(raw, want), f"rank {R}: {name}: the put did not land as sent"

for name, obj, error, words in (
        ("JAX array", jnp.zeros(8, jnp.float32), ValueError, "immutable"),
        ("read-only numpy", np.frombuffer(b"abcdefgh", np.uint8), ValueError, "read-only"),
        ("GPU interface", type("G", (), {"__cuda_array_interface__": {
            "typestr": "<f4", "shape": (4,), "data": (1 << 40, False), "version": 3}})(), TypeError, "GPU")):
    try:
        comm.register(obj)
    except error as e:
        assert str(e).startswith("array:") and words in str(e), f"rank {R}: {name}: {e}"
    else:
        raise AssertionError(f"rank {R}: {name} was registered")
print("OK", R, flush=True)
