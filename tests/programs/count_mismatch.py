"""Ranks that disagree on a call's count (rank 0 passes one element more) get an error on every
rank, without FORESTCC_DEBUG: ValueError where a rank saw the peer's call, AbortedError carrying
that report where the peer saw it first. argv: the algorithm. Prints "MISMATCH <rank>"."""
import sys

import numpy as np

import forestcc
from forestcc.errors import AbortedError

comm = forestcc.init()
R = comm.rank
x = np.ones(100 + (R == 0), dtype=np.float32)
try:
    comm.all_reduce(x, algo=sys.argv[1])
    raise AssertionError(f"rank {R}: all_reduce with different counts returned")
except (ValueError, AbortedError) as e:
    assert "do the ranks' counts and dtypes agree?" in str(e), str(e)
    print("MISMATCH", R, flush=True)
