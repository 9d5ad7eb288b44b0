"""Rules naming eager are clamped to the largest message it serves, and the sizes they give up go
to the rule that follows, in the same placement (FORESTCC_TUNING is set by the test). Prints
"CHOOSE <bytes> <algo>" (any placement) and "PLACED <bytes> <out of place> <in place>"."""
import forestcc
from forestcc import _C

comm = forestcc.init()
limit = _C.plan.algorithm_max_bytes("eager", "all_reduce", comm.size)
if comm.rank == 0:
    for nbytes in (8, limit, limit + 4, 4 << 20, (4 << 20) + 4):
        print("CHOOSE", nbytes, comm._engine.choose("all_reduce", nbytes, 0) or "none", flush=True)
        print("PLACED", nbytes, *(comm._engine.choose("all_reduce", nbytes, 0, ip) or "none"
                                  for ip in (0, 1)), flush=True)
