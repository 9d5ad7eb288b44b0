"""Rank 0 makes a unique id and publishes it in a file; the others read it (a stand-in for any
out-of-band channel, e.g. an MPI broadcast)."""
import os
import sys
import time

import forestcc

path, rank, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if rank == 0:
    uid = forestcc.unique_id()
    with open(path + ".tmp", "wb") as f:
        f.write(bytes(uid))
    os.rename(path + ".tmp", path)
else:
    while not os.path.exists(path):
        time.sleep(0.01)
    with open(path, "rb") as f:
        uid = f.read()
comm = forestcc.init(unique_id=uid, rank=rank, size=size)
got = comm.all_gather_bytes(bytes([rank]))
assert got == [bytes([r]) for r in range(size)]
print(f"OK rank={comm.rank} size={comm.size}", flush=True)
