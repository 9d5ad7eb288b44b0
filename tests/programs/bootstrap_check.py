"""Joins the job from the environment and exercises every bootstrap operation."""
import sys

import forestcc

comm = forestcc.init()
r, n = comm.rank, comm.size
blobs = comm.all_gather_bytes(f"rank{r}".encode() * (r + 1))
assert blobs == [f"rank{q}".encode() * (q + 1) for q in range(n)], blobs
comm.barrier()
if n > 1:
    comm.send_bytes((r + 1) % n, f"from {r}".encode(), tag=7)
    got = comm.recv_bytes((r - 1) % n, tag=7)
    assert got == f"from {(r - 1) % n}".encode(), got
# A message to ourselves works too.
comm.send_bytes(r, b"self", tag=3)
assert comm.recv_bytes(r, tag=3) == b"self"
comm.barrier()
print(f"OK rank={r} size={n} local_rank={comm.local_rank} local_size={comm.local_size} "
      f"nodes={comm.node_count} node={comm.node_of(r)}", flush=True)
sys.exit(0)
