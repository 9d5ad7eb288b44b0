"""FORESTCC_DEBUG=1: ranks that call a collective with different arguments get a ValueError
naming the mismatch instead of hanging or corrupting data. argv: what to vary (count|collective|root|dtype)."""
import sys

import numpy as np

import forestcc

comm = forestcc.init()
R = comm.rank
what = sys.argv[1]
x = np.ones(4 + (R if what == "count" else 0), dtype=np.float32 if what != "dtype" or R == 0 else np.float64)
try:
    if what == "collective" and R == 1:
        comm.broadcast(x, 0)
    elif what == "root":
        comm.broadcast(x, R)
    else:
        comm.all_reduce(x)
except ValueError as e:
    print("MISMATCH", str(e).replace("\n", " | "))
    sys.exit(0)
print("NO ERROR")
sys.exit(1)
