"""Rank 0 enters an all_reduce that rank 1 never joins (rank 1 sleeps), prints "WAITING" and is
then interrupted by the test with SIGINT: it must raise KeyboardInterrupt at once, not wait out
FORESTCC_TIMEOUT. Prints "INTERRUPTED" when it did."""
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
    comm.all_reduce(x)
except KeyboardInterrupt:
    print("INTERRUPTED", flush=True)
    sys.exit(0)
print("RETURNED", flush=True)
sys.exit(1)
