"""Ranks whose buffers differ in memory kind (rank 0 forestcc.empty, the others ordinary numpy
arrays) may get different algorithms from algo="auto" (FORESTCC_TUNING, set by the test, says
direct for shared memory and eager for private): every rank must raise a ValueError that says
so, not return wrong sums or hang. Prints "MISMATCH <rank>" when the error came."""
import numpy as np

import forestcc

comm = forestcc.init()
R, N = comm.rank, comm.size
alloc = forestcc.zeros if R == 0 else np.zeros
x = alloc(1000, dtype=np.float32)
x[:] = R + 1
try:
    comm.all_reduce(x)
    raise AssertionError(f"rank {R}: all_reduce with different algorithms returned {x[:3]}")
except ValueError as e:
    assert "the ranks chose different algorithms" in str(e), str(e)
    print("MISMATCH", R, flush=True)
