"""all_to_all_v where the ranks' splits disagree (rank 1 expects one element fewer from rank 0
and one more from rank 2, so its own sums still match its buffers): an error on every rank,
without FORESTCC_DEBUG, and no rank's output written past what it expects. ValueError on a rank
that found the disagreement, AbortedError carrying that report on the others. argv: the
algorithm; optional "self": rank 1 expects one element fewer from itself instead, and nothing
else differs (its own block's copy disagrees): rank 1 raises, never copies a truncated block; a peer
raises too, or finishes first with its right data ("OK <rank>"); optional "far" (so may a peer): rank 1 expects one
element fewer from the second-to-last rank and one more from the last instead (with the algorithm
"2dh:<node of each rank>", e.g. 2dh:0,0,1,1, both on the other node: the relay there moves their
blocks in one span whose total agrees). Prints "MISMATCH <rank>"."""
import sys

import numpy as np

import forestcc
from forestcc.errors import AbortedError

comm = forestcc.init()
R, N = comm.rank, comm.size
algo = sys.argv[1]
if algo.startswith("2dh:"):  # the 2DH plan for an emulated node layout, on this one machine
    from forestcc.plan import builtin
    algo = builtin.generate("2dh", "all_to_all", N, nodes=[int(a) for a in algo[4:].split(",")])
which = sys.argv[2] if len(sys.argv) > 2 else "peer"
in_splits = [2] * N
out_splits = [2] * N
self_block = which == "self"
if R == 1 and self_block:
    out_splits[1] -= 1  # only its own block disagrees: the peers cannot see it
elif R == 1 and which == "far":
    out_splits[N - 2] -= 1
    out_splits[N - 1] += 1
elif R == 1:
    out_splits[0] -= 1
    out_splits[2] += 1
x = np.arange(sum(in_splits), dtype=np.float32) + 100 * R
out = np.full(sum(out_splits) + 4, -1, dtype=np.float32)  # 4 guard elements past the output
try:
    comm.all_to_all_v(out[:-4], x, out_splits, in_splits, algo=algo)
    if not ((self_block or which == "far") and R != 1):
        raise AssertionError(f"rank {R}: all_to_all_v with disagreeing splits returned")
    # Only rank 1's own block disagrees, or its blocks from ranks of the other node, whose relay
    # finds it: a rank that needs nothing of those may finish first, with its right data.
    want = np.concatenate([np.arange(2 * N, dtype=np.float32)[2 * R:2 * R + 2] + 100 * q for q in range(N)])
    assert (out[:-4] == want).all() and (out[-4:] == -1).all(), out
    print("OK", R, flush=True)
except (ValueError, AbortedError) as e:
    assert ("do the ranks' counts or splits agree?" in str(e)
            or "all_to_all_v's splits do not match the blocks the plan moves" in str(e)), str(e)
    assert (out[-4:] == -1).all(), out
    print("MISMATCH", R, flush=True)
