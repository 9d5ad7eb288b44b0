"""Arguments of the wrong type or out of range are refused before anything is sent, with an
error naming the argument: root, peer, async_op and all_to_all_v's splits. Prints "OK <rank>"."""
import numpy as np

import forestcc

comm = forestcc.init()
R, N = comm.rank, comm.size
x = np.ones(4, np.float32)


def refuses(exc, words, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc as e:
        msg = str(e)
        assert all(w in msg for w in words), f"{fn.__name__}: {msg!r} lacks {words}"
        assert "incompatible function arguments" not in msg, msg
        return
    raise AssertionError(f"{fn.__name__}{args} was not refused")


out = np.zeros(4 * N, np.float32)
refuses(TypeError, ["root", "integer", "1.5"], comm.broadcast, x, 1.5)
refuses(TypeError, ["root", "integer", "'0'"], comm.gather, out, x, "0")
refuses(ValueError, ["root", "64 bits"], comm.reduce, x, 2**70)
refuses(ValueError, ["root", "out of range", str(N)], comm.scatter, x, out, 2**40)
refuses(TypeError, ["peer", "integer"], comm.send, x, None)
refuses(ValueError, ["peer", "out of range"], comm.recv, x, -1)
refuses(TypeError, ["async_op", "True or False"], comm.all_reduce, x, async_op="yes")
ones = [1] * N
v_out = np.zeros(N, np.float32)
v_in = np.ones(N, np.float32)
refuses(TypeError, ["in_splits[0]", "integer", "1.0"], comm.all_to_all_v, v_out, v_in, ones,
        [1.0] * N)
refuses(TypeError, ["out_splits[0]", "integer"], comm.all_to_all_v, v_out, v_in, ["1"] * N, ones)
refuses(ValueError, ["in_splits[0]", "64 bits"], comm.all_to_all_v, v_out, v_in, ones,
        [2**64] + [1] * (N - 1))
refuses(ValueError, ["in_splits[0]", ">= 0"], comm.all_to_all_v, v_out, v_in, ones, [-1] * N)
# 4 x 2**62 wraps to 0 in 64 bits: it must not pass as a sum of N (three entries wrap too).
if N >= 3:
    wrap = [2**62] * 4 if N >= 4 else [2**63 - 1] * 3
    refuses(ValueError, ["in_splits", "2**64"], comm.all_to_all_v, v_out, v_in, ones,
            wrap + [0] * (N - len(wrap)))
refuses(TypeError, ["in_splits", "sequence"], comm.all_to_all_v, v_out, v_in, ones, 5)
# numpy integers are integers.
comm.broadcast(x, np.int64(0))
comm.all_reduce(x, async_op=np.bool_(False))
comm.barrier()
comm.barrier(async_op=True).wait()  # a call with no arrays queued (held no arrays: broke once)
print("OK", R, flush=True)
