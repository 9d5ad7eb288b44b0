"""FORESTCC_TIMEOUT=inf (or init(timeout=inf) with argv[1] "init"): the longest timeout there is,
not one that expires at once. Rank 1 comes to init and to the collective a second late; rank 0
waits for it. (Before, inf overflowed the deadline's nanoseconds: "bootstrap timed out after inf
s" after 0.1 s, "timed out after inf s" at once.) Prints "OK <rank> <comm.timeout>"."""
import math
import os
import sys
import time

import numpy as np

import forestcc

by_init = len(sys.argv) > 1 and sys.argv[1] == "init"

rank = int(os.environ["FORESTCC_RANK"])
if rank == 1:
    time.sleep(1)
comm = forestcc.init(timeout=math.inf) if by_init else forestcc.init()
if comm.rank == 1:
    time.sleep(1)
x = np.ones(16, np.float32)
comm.all_reduce(x)
assert (x == comm.size).all(), x
print("OK", comm.rank, comm.timeout, flush=True)
