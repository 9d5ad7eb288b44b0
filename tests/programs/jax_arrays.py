"""JAX CPU arrays through every collective that reads them (JAX arrays are immutable: results go
to a writable numpy out=), each dtype JAX has that forestcc reduces, against numpy. A call that
would write into a JAX array raises ValueError naming the argument. Prints "OK <rank>"."""
import jax

jax.config.update("jax_enable_x64", True)  # int64, uint64 and float64 arrays stay 64-bit
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import forestcc  # noqa: E402

comm = forestcc.init()
N, R = comm.size, comm.rank
DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32",
          "float64", "float8_e4m3fn", "float8_e5m2"]


def np_dtype(name):
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def values(rank, count, dtype):
    """Small integers, exact in every dtype (fp8 included) and in every sum of N of them."""
    return ((np.arange(count) * 3 + rank * 5) % 7).astype(np_dtype(dtype))


def as_jax(a):
    x = jnp.asarray(a)
    assert isinstance(x, jax.Array) and x.dtype == a.dtype, (x.dtype, a.dtype)
    return x


def check(what, got, want):
    assert got.dtype == want.dtype and np.array_equal(got.astype(np.float64), want.astype(np.float64)), (
        f"rank {R}: {what}: got {got[:8]}, want {want[:8]}")


COUNT = 37  # not a multiple of the ranks or of a vector
for dtype in DTYPES:
    dt = np_dtype(dtype)
    inputs = [values(r, COUNT * N, dtype) for r in range(N)]
    x = as_jax(inputs[R])
    wide = np.stack([a.astype(np.float64) for a in inputs])
    for op, fold in (("sum", wide.sum(0)), ("max", wide.max(0))):
        out = np.empty(COUNT * N, dt)
        comm.all_reduce(x, op=op, out=out)
        check(f"all_reduce {dtype} {op}", out, fold.astype(dt))
        out = np.empty(COUNT, dt)
        comm.reduce_scatter(out, x, op=op)
        check(f"reduce_scatter {dtype} {op}", out, fold.astype(dt)[R * COUNT:(R + 1) * COUNT])
    small = as_jax(inputs[R][:COUNT])
    out = np.empty(COUNT * N, dt)
    comm.all_gather(out, small)
    check(f"all_gather {dtype}", out, np.concatenate([a[:COUNT] for a in inputs]))
    out = np.empty(COUNT * N, dt)
    comm.all_to_all(out, x)
    check(f"all_to_all {dtype}", out, np.concatenate([a[R * COUNT:(R + 1) * COUNT] for a in inputs]))
    out = np.empty(COUNT * N, dt)
    comm.all_reduce(x, out=out, async_op=True).wait()
    check(f"async all_reduce {dtype}", out, wide.sum(0).astype(dt))

# point to point: a JAX array is sent as it is
if N > 1:
    out = np.empty(COUNT, np.float32)
    comm.send_recv(sends=[(as_jax(values(R, COUNT, "float32")), (R + 1) % N)], recvs=[(out, (R - 1) % N)])
    check("send_recv", out, values((R - 1) % N, COUNT, "float32"))

# A JAX GPU array's __cuda_array_interface__ may call it writable; JAX arrays are immutable
# whatever they export. No GPU here: a stand-in of JAX's array class by module, whose pointer is
# never touched because the refusal comes first.
JaxGpuArray = type("ArrayImpl", (), {"__module__": "jaxlib.xla_extension", "__cuda_array_interface__": {
    "typestr": "<f4", "shape": (8,), "data": (1 << 40, False), "version": 3}})

# what would write into a JAX array is refused on every rank alike, before anything is sent
for name, call in (("all_reduce on the GPU", lambda: comm.all_reduce(JaxGpuArray())),
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
