"""Ranks that disagree on FORESTCC_PACKETS (rank 0 on, the others off) would not find each
other's data in an eager call (packets on one side, puts and signals on the other): every rank
must raise a MismatchError (or an AbortedError carrying one) naming the call, never wait out the
timeout or return. Prints "MISMATCH <rank>"."""
import os

import numpy as np

os.environ["FORESTCC_PACKETS"] = "on" if os.environ["FORESTCC_RANK"] == "0" else "off"

import forestcc  # noqa: E402  (the setting is read when the communicator is made)
from forestcc.errors import AbortedError, MismatchError  # noqa: E402

comm = forestcc.init()
R = comm.rank
x = np.ones(100, dtype=np.float32)
try:
    comm.all_reduce(x, algo="eager")
    raise AssertionError(f"rank {R}: an eager all_reduce with different packet settings returned")
except (MismatchError, AbortedError) as e:
    assert "eager" in str(e) and "FORESTCC_PACKETS" in str(e) and "Timeout" not in type(e).__name__, (
        f"{type(e).__name__}: {e}")
    print("MISMATCH", R, type(e).__name__, flush=True)
