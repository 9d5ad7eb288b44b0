"""Faults across hosts (tests/test_multinode.py). usage: multinode_faults.py CASE
  kill  all_reduce in a loop; the last rank kills itself at call 20: every other rank must raise
        an error naming it, and exit 3.
  cut   all_reduce in a loop until it fails (the test cuts a host's link): print the error, exit 3.
"""
import os
import signal
import sys

import numpy as np

import forestcc

case = sys.argv[1]
comm = forestcc.init()
r, n = comm.rank, comm.size
x = np.ones(1 << 16, np.float32)
print(f"READY rank={r}", flush=True)
try:
    for i in range(10 ** 9):
        if case == "kill" and i == 20 and r == n - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        x[:] = 1
        comm.all_reduce(x)
        assert x[0] == n, x[0]
except forestcc.ForestccError as e:
    print(f"ERROR rank={r} {type(e).__name__} peer={e.peer}: {e}", flush=True)
    sys.exit(3)
