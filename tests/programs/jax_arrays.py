"""JAX arrays through every collective that reads them, each dtype JAX has that forestcc reduces,
against numpy. JAX arrays are immutable: results go to a writable out= (numpy; with --gpu, a
PyTorch CUDA tensor from forestcc.cuda.empty, the inputs JAX arrays on the rank's GPU). A call
that would write into a JAX array raises ValueError naming the argument. Prints "OK <rank>"."""
import os
import sys

GPU = "--gpu" in sys.argv
if GPU:  # JAX takes most of the GPU's memory at its first array; the ranks share one GPU
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # int64, uint64 and float64 arrays stay 64-bit
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import forestcc  # noqa: E402

comm = forestcc.init()
N, R = comm.size, comm.rank
DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32",
          "float64", "float8_e4m3fn", "float8_e5m2"]
if GPU:
    import torch

    import forestcc.cuda
    index = comm.local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    DEVICE = jax.devices("gpu")[index]


def np_dtype(name):
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def values(rank, count, dtype):
    """Small integers, exact in every dtype (fp8 included) and in every sum of N of them."""
    return ((np.arange(count) * 3 + rank * 5) % 7).astype(np_dtype(dtype))


def as_jax(a):
    x = jax.device_put(a, DEVICE) if GPU else jnp.asarray(a)
    assert isinstance(x, jax.Array) and x.dtype == a.dtype, (x.dtype, a.dtype)
    return x


def empty(count, dt):
    return forestcc.cuda.empty(count, dt, like="torch") if GPU else np.empty(count, dt)


def host(out, dt):
    """out's values as numpy, once the GPU calls before finished."""
    if not GPU:
        return out
    comm.synchronize()
    return out.cpu().view(torch.uint8).numpy().view(dt)


def check(what, out, want):
    got = host(out, want.dtype)
    assert got.dtype == want.dtype and np.array_equal(got.astype(np.float64), want.astype(np.float64)), (
        f"rank {R}: {what}: got {got[:8]}, want {want[:8]}")


COUNT = 37  # not a multiple of the ranks or of a vector
for dtype in DTYPES:
    dt = np_dtype(dtype)
    inputs = [values(r, COUNT * N, dtype) for r in range(N)]
    x = as_jax(inputs[R])
    wide = np.stack([a.astype(np.float64) for a in inputs])
    for op, fold in (("sum", wide.sum(0)), ("max", wide.max(0))):
        out = empty(COUNT * N, dt)
        comm.all_reduce(x, op=op, out=out)
        check(f"all_reduce {dtype} {op}", out, fold.astype(dt))
        out = empty(COUNT, dt)
        comm.reduce_scatter(out, x, op=op)
        check(f"reduce_scatter {dtype} {op}", out, fold.astype(dt)[R * COUNT:(R + 1) * COUNT])
    small = as_jax(inputs[R][:COUNT])
    out = empty(COUNT * N, dt)
    comm.all_gather(out, small)
    check(f"all_gather {dtype}", out, np.concatenate([a[:COUNT] for a in inputs]))
    out = empty(COUNT * N, dt)
    comm.all_to_all(out, x)
    check(f"all_to_all {dtype}", out, np.concatenate([a[R * COUNT:(R + 1) * COUNT] for a in inputs]))
    out = empty(COUNT * N, dt)
    comm.all_reduce(x, out=out, async_op=True).wait()
    check(f"async all_reduce {dtype}", out, wide.sum(0).astype(dt))

# point to point: a JAX array is sent as it is
if N > 1:
    out = empty(COUNT, np.float32)
    comm.send_recv(sends=[(as_jax(values(R, COUNT, "float32")), (R + 1) % N)], recvs=[(out, (R - 1) % N)])
    check("send_recv", out, values((R - 1) % N, COUNT, "float32"))

# A JAX GPU array's __cuda_array_interface__ may call it writable; JAX arrays are immutable
# whatever they export. On CPU: a stand-in of JAX's array class by module, whose pointer is never
# touched because the refusal comes first.
JaxGpuArray = type("ArrayImpl", (), {"__module__": "jaxlib.xla_extension", "__cuda_array_interface__": {
    "typestr": "<f4", "shape": (8,), "data": (1 << 40, False), "version": 3}})
gpu_array = (lambda: as_jax(values(R, 8, "float32"))) if GPU else JaxGpuArray

# what would write into a JAX array is refused on every rank alike, before anything is sent
for name, call in (("all_reduce on the GPU", lambda: comm.all_reduce(gpu_array())),
                   ("all_reduce", lambda: comm.all_reduce(as_jax(values(R, 8, "float32")))),
                   ("broadcast", lambda: comm.broadcast(as_jax(values(R, 8, "float32")), root=0)),
                   ("all_gather out", lambda: comm.all_gather(as_jax(values(R, 8 * N, "float32")),
                                                              as_jax(values(R, 8, "float32"))))):
    try:
        call()
    except ValueError as e:
        assert "read-only" in str(e) and "JAX" in str(e), f"rank {R}: {name}: {e}"
    else:
        raise AssertionError(f"rank {R}: {name} into a JAX array returned")
comm.barrier()  # the communicator is still usable
print("OK", R, flush=True)
