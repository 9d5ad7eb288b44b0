"""algo="auto" by memory kind: FORESTCC_TUNING (set by the test) sends all_reduce on
forestcc.empty buffers to one algorithm and on ordinary arrays to another; prints
"PLAN <memory> <plan name>" for each, after checking the result."""
import numpy as np

import forestcc

comm = forestcc.init()
for memory, alloc in (("private", np.zeros), ("shared", forestcc.zeros)):
    x = alloc(1000, dtype=np.float32)
    x[:] = comm.rank + 1
    comm.all_reduce(x)
    assert (x == comm.size * (comm.size + 1) / 2).all(), memory
    print("PLAN", memory, comm.last_plan("all_reduce"), flush=True)
print("choose", comm._engine.choose("all_reduce", 4000, 0), comm._engine.choose("all_reduce", 4000, 1),
      comm._engine.choose("all_reduce", 4000), flush=True)
# GPU memory (code 2) matches only "device" rules, host memory never does
print("device", comm._engine.choose("all_reduce", 4000, 2), flush=True)
