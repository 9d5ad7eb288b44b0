"""Rank 0 enters an all_reduce that rank 1 never joins (rank 1 sleeps), prints "WAITING" and is
then interrupted by the test with SIGINT: it must raise KeyboardInterrupt at once, not wait out
FORESTCC_TIMEOUT. Prints "INTERRUPTED" when it did.

argv: [PLAN]: an all_gather plan file to run instead (split_worker_all_gather_2.json: worker 0
only copies, so rank 0's main thread is done while its other worker waits for rank 1)."""
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
    if len(sys.argv) > 1:
        comm.all_gather(np.empty(2 * x.size, x.dtype), x, algo=sys.argv[1])
    else:
        comm.all_reduce(x)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    sys.exit(0)
print("RETURNED", flush=True)
sys.exit(1)
