"""Every argument error of the collectives API is refused before any rank communicates, with the
right exception naming the argument; afterwards a correct collective still works (nothing was
left half-done). Run on 2 or more ranks; prints "OK n" when every case behaved."""
import numpy as np

import forestcc

comm = forestcc.init()
N, R = comm.size, comm.rank
x = np.arange(8, dtype=np.float32)
cases = 0


def refuses(exc, words, fn, *a, **kw):
    global cases
    try:
        fn(*a, **kw)
    except exc as e:
        msg = str(e)
        assert all(w in msg for w in words), f"{fn.__name__}: message {msg!r} lacks {words}"
        cases += 1
        return
    raise AssertionError(f"{fn.__name__}{a} did not raise {exc.__name__}")


refuses(ValueError, ["x", "contiguous"], comm.all_reduce, np.arange(16, dtype=np.float32)[::2])
refuses(TypeError, ["x", "int16", "not supported"], comm.all_reduce, np.arange(4, dtype=np.int16))
refuses(TypeError, ["x", "complex"], comm.all_reduce, np.zeros(4, dtype=np.complex64))
refuses(TypeError, ["x", "expected an array"], comm.all_reduce, "not an array")
# the other byte order: its bytes would be read, and an output's written, as other numbers
swapped = np.dtype(np.float32).newbyteorder("S")
refuses(TypeError, ["x", "byte order", swapped.str], comm.all_reduce, x.astype(swapped))
refuses(TypeError, ["out", "byte order"], comm.all_reduce, x, out=np.empty(8, swapped))
refuses(TypeError, ["out", "byte order"], comm.all_gather, np.empty(8 * N, np.dtype(np.int32).newbyteorder("S")),
        np.arange(8, dtype=np.int32))
refuses(TypeError, ["x", "byte order"], comm.all_gather, np.empty(8 * N, np.int32),
        np.arange(8, dtype=np.dtype(np.int32).newbyteorder("S")))
refuses(ValueError, ["op", "unknown reduction", "bogus"], comm.all_reduce, x.copy(), op="bogus")
refuses(ValueError, ["out", "has 7 elements", "expected 8"], comm.all_reduce, x, out=np.empty(7, np.float32))
refuses(TypeError, ["out", "float64", "float32"], comm.all_reduce, x, out=np.empty(8, np.float64))
ro = x.copy()
ro.flags.writeable = False
refuses(ValueError, ["out", "read-only"], comm.all_reduce, x, out=ro)
refuses(ValueError, ["x", "read-only"], comm.all_reduce, ro)
buf = np.zeros(12, np.float32)
refuses(ValueError, ["out", "overlaps"], comm.all_reduce, buf[:8], out=buf[4:12])
refuses(ValueError, ["root", "must be a rank", str(N)], comm.broadcast, x.copy(), N)
refuses(ValueError, ["root", "-1"], comm.reduce, x.copy(), -1)
refuses(ValueError, ["out", "expected"], comm.all_gather, np.empty(N * 8 + 1, np.float32), x)
refuses(ValueError, ["x", "expected"], comm.reduce_scatter, np.empty(8, np.float32), np.empty(8 * N + 1, np.float32))
if N > 1:
    refuses(ValueError, ["x", "divide", "all_to_all_v"], comm.all_to_all, np.empty(N * 2 + 1, np.float32),
            np.empty(N * 2 + 1, np.float32))
refuses(ValueError, ["in_splits", "one per rank"], comm.all_to_all_v, np.empty(1, np.float32),
        np.empty(1, np.float32), [1] * N, [1] * (N + 1))
refuses(ValueError, ["x", "sum of in_splits"], comm.all_to_all_v, np.empty(N, np.float32),
        np.empty(N + 1, np.float32), [1] * N, [1] * N)
refuses(ValueError, ["algo", "neither", "built-in algorithm"], comm.all_reduce, x.copy(), algo="no-such-algo")
refuses(ValueError, ["peer", "out of range"], comm.send, x, N + 3)
refuses(ValueError, ["peer", "this rank"], comm.recv, x.copy(), R)
# a batch whose receive buffer overlaps another buffer of it (its messages move at once, in no set
# order: the data would depend on timing). A refused message still takes its place (its match on
# the peer fails), so each refused batch is one the peers' refused batches match: a ring.
nxt, prv = (R + 1) % N, (R - 1) % N
z = np.arange(16, dtype=np.float32)
refuses(ValueError, ["recvs[0]", "overlaps", "sends[0]"], comm.send_recv, sends=[(z, nxt)], recvs=[(z, prv)])
refuses(ValueError, ["recvs[1]", "overlaps", "recvs[0]"], comm.send_recv,
        sends=[(x, nxt), (x, prv)], recvs=[(z[:8], prv), (z[4:12], nxt)])
refuses(ValueError, ["overlaps"], comm.send_recv, sends=[(z[:4], R), (z[4:8], R)], recvs=[(z[4:8], R), (z[8:12], R)])
comm.send_recv(sends=[(z[:8], R), (z[:8], R)], recvs=[(z[8:], R), (np.empty(8, np.float32), R)])  # sends may share
assert (z[8:] == z[:8]).all(), z

# nothing was half-done: a correct collective still gives the right answer
y = np.full(5, R + 1, dtype=np.int64)
comm.all_reduce(y)
assert (y == N * (N + 1) // 2).all(), y
print("OK", cases)
