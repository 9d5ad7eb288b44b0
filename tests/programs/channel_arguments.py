"""Channel arguments and waits with a timeout of the caller's, on 2 ranks.

- offsets and sizes that are negative or 2**64 and more are a ValueError naming the argument
  (before: pybind11's TypeError listing signatures);
- wait(timeout=0.2) with no signal raises forestcc.TimeoutError and leaves the channel and the
  communicator usable: the next wait gets the signal, and a collective runs (before: it poisoned
  the communicator);
- wait(timeout=inf) waits (before: it expired at once, "timed out after inf s", and poisoned);
- wait(timeout=nan) and wait(timeout=-1) are a ValueError; an array of Python objects cannot be
  registered (before: a peer's put overwrote its pointers and the owner crashed reading it).
Prints "OK <rank>"."""
import math

import numpy as np

import forestcc

comm = forestcc.init()
r = comm.rank
peer = 1 - r
buf = np.zeros(64, np.uint8)
ch = comm.connect(peer, buf, tag=1)


def refused(kind, words, f, *args, **kwargs):
    try:
        f(*args, **kwargs)
    except kind as e:
        assert all(w in str(e) for w in words), (words, str(e))
        return
    raise AssertionError(f"{f.__name__}{args} was not refused")


refused(ValueError, ["put on channel", "dst_offset is negative"], ch.put, -1, 0, 4)
refused(ValueError, ["put on channel", "nbytes is 2**64 or more"], ch.put, 0, 0, 2**64)
refused(ValueError, ["get on channel", "src_offset is negative"], ch.get, 0, -8, 4)
refused(ValueError, ["put_with_signal on channel", "nbytes is negative"], ch.put_with_signal, 0, 0, -4)
refused(ValueError, ["timeout must be None"], ch.wait, timeout=math.nan)
refused(ValueError, ["timeout must be None"], ch.wait, timeout=-1.0)
refused(TypeError, ["dtype object"], comm.register, np.array([object()] * 4, dtype=object))
comm.barrier()

if r == 0:
    try:
        ch.wait(timeout=0.2)  # rank 1 signals only after the barrier below
        raise AssertionError("a wait with no signal returned")
    except forestcc.TimeoutError as e:
        assert "within the 0.2 s given to wait()" in str(e), str(e)
    comm.barrier()  # the communicator is not poisoned
    ch.wait()  # the signal the timed-out wait did not get
    ch.wait(timeout=math.inf)  # the second, after rank 1's sleep
else:
    comm.barrier()
    buf[:4] = 7
    ch.put_with_signal(0, 0, 4)
    import time
    time.sleep(1)
    ch.signal()
x = np.ones(4, np.float32)
comm.all_reduce(x)
assert (x == 2).all(), x
if r == 0:
    assert (buf[:4] == 7).all(), buf[:4]
print("OK", r, flush=True)
