"""An error raised while a plan runs carries where it happened as data: .collective, .plan,
.worker and .step (the message says the same in words). Rank 1 leaves without calling; rank 0's
all_reduce fails at the step that waits for it. Prints "CONTEXT <collective> <plan> <worker> <step>"."""
import os

import numpy as np

import forestcc
from forestcc.errors import ForestccError

comm = forestcc.init()
if comm.rank == 1:
    os._exit(0)
x = np.ones(1000, dtype=np.float32)
try:
    comm.all_reduce(x, algo="ring")
    raise AssertionError("all_reduce returned without rank 1")
except ForestccError as e:
    assert e.peer == 1, (e.peer, str(e))
    assert f"worker {e.worker} step {e.step} " in str(e), str(e)
    print("CONTEXT", e.collective, e.plan, e.worker, e.step, flush=True)
    os._exit(0)
