"""Rank 0 enters an all_reduce that rank 1 never joins (rank 1 sleeps), prints "WAITING" and is
then interrupted by the test with SIGINT: it must raise KeyboardInterrupt at once, not wait out
FORESTCC_TIMEOUT. Prints "INTERRUPTED" when it did.

argv: [PLAN]: an all_gather plan file to run instead (split_worker_all_gather_2.json: worker 0
only copies, so rank 0's main thread is done while its other worker waits for rank 1); or a mode:
  async  the all_reduce with async_op=True, then its handle's wait();
  recv   an async recv from rank 1, then its handle's wait();
  split  comm.split(0) (its exchange waits in the bootstrap)."""
import sys
import time

import numpy as np

import forestcc

comm = forestcc.init()
if comm.rank == 1:
    time.sleep(3600)
    sys.exit(0)
x = np.ones(1000, np.float32)
print("WAITING", flush=True)
try:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "async":
        comm.all_reduce(x, async_op=True).wait()
    elif mode == "recv":
        comm.recv(x, 1, async_op=True).wait()
    elif mode == "split":
        comm.split(0)
    elif mode:
        comm.all_gather(np.empty(2 * x.size, x.dtype), x, algo=mode)
    else:
        comm.all_reduce(x)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    sys.exit(0)
print("RETURNED", flush=True)
sys.exit(1)
