"""algo="auto" by placement: FORESTCC_TUNING (set by the test) has rules for in-place and for
out-of-place calls; prints "PLAN <collective> <in_place|out_of_place> <plan name>" for each
call, after checking its result, and the engine's choice by placement code."""
import numpy as np

import forestcc

comm = forestcc.init()
R, N = comm.rank, comm.size
for placement in ("in_place", "out_of_place"):
    ip = placement == "in_place"
    x = np.full(1000, R + 1, dtype=np.float32)
    out = comm.all_reduce(x, out=None if ip else np.empty_like(x))
    out = x if ip else out
    assert (out == N * (N + 1) / 2).all(), placement
    print("PLAN all_reduce", placement, comm.last_plan("all_reduce"), flush=True)

    x = np.arange(N * 10, dtype=np.float32) + 1000 * R
    out = x if ip else np.empty_like(x)
    comm.all_to_all(out, x)
    want = np.concatenate([np.arange(R * 10, R * 10 + 10, dtype=np.float32) + 1000 * p
                           for p in range(N)])
    assert (out == want).all(), placement
    print("PLAN all_to_all", placement, comm.last_plan("all_to_all"), flush=True)

    out = np.full(N * 10, -1, dtype=np.float32)
    x = out[R * 10:(R + 1) * 10] if ip else np.empty(10, dtype=np.float32)
    x[:] = R
    comm.all_gather(out, x)
    assert (out == np.repeat(np.arange(N, dtype=np.float32), 10)).all(), placement
    print("PLAN all_gather", placement, comm.last_plan("all_gather"), flush=True)
print("choose", comm._engine.choose("all_reduce", 4000, 0, 0) or "none",
      comm._engine.choose("all_reduce", 4000, 0, 1) or "none",
      comm._engine.choose("all_reduce", 4000, 0) or "none", flush=True)
