"""all_to_all_v where the ranks' splits disagree (rank 1 expects one element fewer from rank 0
and one more from rank 2, so its own sums still match its buffers): an error on every rank,
without FORESTCC_DEBUG, and no rank's output written past what it expects. ValueError on a rank
that found the disagreement, AbortedError carrying that report on the others. argv: the
algorithm. Prints "MISMATCH <rank>"."""
import sys

import numpy as np

import forestcc
from forestcc.errors import AbortedError

comm = forestcc.init()
R, N = comm.rank, comm.size
in_splits = [2] * N
out_splits = [2] * N
if R == 1:
    out_splits[0] -= 1
    out_splits[2] += 1
x = np.arange(sum(in_splits), dtype=np.float32) + 100 * R
out = np.full(sum(out_splits) + 4, -1, dtype=np.float32)  # 4 guard elements past the output
try:
    comm.all_to_all_v(out[:-4], x, out_splits, in_splits, algo=sys.argv[1])
    raise AssertionError(f"rank {R}: all_to_all_v with disagreeing splits returned")
except (ValueError, AbortedError) as e:
    assert "do the ranks' counts or splits agree?" in str(e), str(e)
    assert (out[-4:] == -1).all(), out
    print("MISMATCH", R, flush=True)
