"""Peers let go of released buffers: every iteration each rank allocates a new forestcc.empty
buffer, runs a collective on it (peers map it) and drops it; afterwards this rank must not keep
peers' released buffers mapped. Prints "DELETED_MAPPINGS n" (mappings of unlinked buffers)."""
import gc

import numpy as np

import forestcc

comm = forestcc.init()
for i in range(20):
    x = forestcc.zeros(1 << 18, dtype=np.float32)   # 1 MiB
    x[:] = comm.rank
    comm.all_reduce(x, algo="direct")
    assert (x == sum(range(comm.size))).all()
    del x
    gc.collect()
comm.barrier()
y = forestcc.zeros(1 << 18, dtype=np.float32)        # one more new segment triggers the sweep
comm.all_reduce(y, algo="direct")
with open("/proc/self/maps") as maps:
    deleted = [line for line in maps if "/dev/shm/" in line and "-buf" in line and "(deleted)" in line]
print("DELETED_MAPPINGS", len(deleted), flush=True)
