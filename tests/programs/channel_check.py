"""Channel correctness between ranks in a ring: sizes, get, rounds, ordering.
usage: channel_check.py MODE   (shm: buffers from forestcc.empty; plain: ordinary numpy arrays)

A channel's memory is both where this rank's puts read from and where the peer's puts land, so
each buffer has a source half [0, MAX) and a destination half [MAX, 2*MAX)."""
import sys

import numpy as np

import forestcc

mode = sys.argv[1]
comm = forestcc.init()
r, n = comm.rank, comm.size
nxt, prv = (r + 1) % n, (r - 1) % n
MAX = 64 << 20
buf = forestcc.empty(2 * MAX, np.uint8) if mode == "shm" else np.empty(2 * MAX, np.uint8)
src, dst = buf[:MAX], buf[MAX:]
dst[:] = 0
pattern = np.random.default_rng(1234).integers(0, 256, MAX, dtype=np.uint8)

peers = [nxt, prv] if nxt != prv else [nxt]
ch = dict(zip(peers, comm.connect(peers, buf, tag=1)))
flags = dict(zip(peers, comm.connect(peers, np.zeros(8, np.uint8), tag=2)))  # pure sync
for c in ch.values():
    want = "shm" if (mode == "shm" or c.peer == r) else "cma"
    assert c.transport == want, (c, want)
    assert c.local_nbytes == c.remote_nbytes == 2 * MAX


def payload(size, rank, salt):
    return np.roll(pattern[:size], rank * 7 + salt)


# 1. sizes 0, 1, unaligned, a page plus one, 64 MiB: put, signal, and check after the wait.
for size in [0, 1, 3, 4099, 65537, MAX]:
    off = 5 if size + 5 <= MAX else 0
    src[:size] = payload(size, r, size % 5)
    small = size < 1 << 20
    if small:
        dst[:off + size + 64] = 0
    comm.barrier()
    ch[nxt].put_with_signal(MAX + off, 0, size)
    ch[prv].wait()
    assert np.array_equal(dst[off:off + size], payload(size, prv, size % 5)), \
        f"size {size}: wrong data from rank {prv}"
    if small:  # nothing around the target range was touched
        assert not dst[:off].any() and not dst[off + size:off + size + 64].any()
    comm.barrier()

# 2. get: read the previous rank's source half into our destination half.
src[:4096] = payload(4096, r, 9)
comm.barrier()
ch[prv].get(MAX + 8192, 0, 4096)
assert np.array_equal(dst[8192:8192 + 4096], payload(4096, prv, 9)), "get returned wrong data"
comm.barrier()

# 3. many rounds with changing data; nobody reuses a slot before its reader has seen it.
for k in range(300):
    src[:64] = (k + r) % 256
    slot = 64 * (k % 8)
    ch[nxt].put(MAX + slot, 0, 64)
    ch[nxt].signal()
    ch[prv].wait()
    assert (dst[slot:slot + 64] == (k + prv) % 256).all(), f"round {k}"
    flags[nxt].signal()
    flags[prv].wait()

# 4. never before the signal: the data may land early, the semaphore must not fire early.
if n > 1:
    for k in range(50):
        if r == 0:
            src[:8] = k
            ch[1].put(MAX, 0, 8)     # data lands...
            flags[1].wait()          # ...the peer checks that no signal is there yet...
            ch[1].signal()           # ...then we signal
        elif r == 1:
            assert not ch[0].test(), "a wait succeeded before the signal was sent"
            flags[0].signal()
            ch[0].wait()
            assert (dst[:8] == k).all()
        comm.barrier()
print(f"OK rank={r}", flush=True)
