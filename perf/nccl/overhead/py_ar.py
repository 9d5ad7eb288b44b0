"""8-byte in-place all_reduce through the Python API, timed per call (mean of N)."""
import sys, time
import numpy as np
import forestcc
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
comm = forestcc.init()
x = np.array([1, 2], dtype=np.float32)
for _ in range(500): comm.all_reduce(x)
t = time.perf_counter()
for _ in range(iters): comm.all_reduce(x)
us = (time.perf_counter() - t) / iters * 1e6
if comm.rank == 0: print(f"python {us:.2f} us", flush=True)
