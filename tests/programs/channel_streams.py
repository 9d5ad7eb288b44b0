"""Several channels at once: three tags to the same peers, each with its own buffer, used
interleaved; every stream's data must arrive intact and only in its own buffer."""
import numpy as np

import forestcc

comm = forestcc.init()
r, n = comm.rank, comm.size
nxt, prv = (r + 1) % n, (r - 1) % n
peers = [nxt, prv] if nxt != prv else [nxt]
bufs = [forestcc.zeros(1 << 16, np.int64) for _ in range(3)]
chans = [dict(zip(peers, comm.connect(peers, b, tag=10 + i))) for i, b in enumerate(bufs)]
for k in range(100):
    for i, b in enumerate(bufs):
        b[:1024] = r * 1000 + i * 100 + k
        chans[i][nxt].put(8 * 1024 * (1 + k % 4), 0, 8 * 1024)
    for i in reversed(range(3)):
        chans[i][nxt].signal()
    for i, b in enumerate(bufs):
        chans[i][prv].wait()
        lo = 1024 * (1 + k % 4)
        assert (b[lo:lo + 1024] == prv * 1000 + i * 100 + k).all(), (k, i)
    comm.barrier()
print(f"OK rank={r}", flush=True)
