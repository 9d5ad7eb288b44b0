"""init(timeout=...) bounds every later wait, not only the rendezvous: with FORESTCC_TIMEOUT=600
set by the test, a communicator made with timeout=3 whose peer skips a call times out within
the 3 s (the test's own limit would catch 600). Prints "OK <rank> <timeout>"."""
import time

import numpy as np

import forestcc
from forestcc.errors import AbortedError, TimeoutError

world = forestcc.init()
R = world.rank
uid = bytes(forestcc.unique_id()) if R == 0 else None
uid = world.all_gather_bytes(uid or b"")[0]
comm = forestcc.init(unique_id=uid, rank=R, size=world.size, timeout=3)
assert comm.timeout == 3.0, comm.timeout
if R == 1:
    while True:  # stays away from the call until rank 0 gave up (poisoned the communicator)
        try:
            comm._native.check_healthy()
        except AbortedError:
            break
        time.sleep(0.05)
else:
    try:
        comm.all_reduce(np.ones(10, np.float32))
        raise AssertionError("returned")
    except TimeoutError as e:
        assert "after 3 s" in str(e), str(e)
print("OK", R, comm.timeout, flush=True)
