"""all_reduce gives every rank bitwise the same result, with every built-in algorithm, in and
out of place, on float32/float16 data whose sums round differently in different orders. Prints
"IDENTICAL <algorithms checked>" on rank 0."""
import numpy as np

import forestcc
from forestcc import _C

comm = forestcc.init()
N, R = comm.size, comm.rank
algos = [name for name, colls in _C.plan.algorithms() if "all_reduce" in colls] + ["auto"]
rng = np.random.default_rng(1234 + R)
checked = 0
for algo in algos:
    for dtype in (np.float32, np.float16):
        for count in (1, 33, 5000):
            x = (rng.standard_normal(count) * 10.0 ** rng.integers(-3, 4, count)).astype(dtype)
            for in_place in (False, True):
                if in_place:
                    y = x.copy()
                    comm.all_reduce(y, algo=algo)
                else:
                    y = np.empty_like(x)
                    comm.all_reduce(x, out=y, algo=algo)
                bits = y.view(np.uint8)
                every = np.empty(N * bits.size, dtype=np.uint8)
                comm.all_gather(every, bits, algo="direct")
                every = every.reshape(N, bits.size)
                assert (every == every[0]).all(), (algo, dtype.__name__, count, in_place,
                                                   np.nonzero((every != every[0]).any(axis=1)))
                checked += 1
if R == 0:
    print("IDENTICAL", checked, " ".join(algos), flush=True)
