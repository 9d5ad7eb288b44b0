"""One call of a plan with 32 workers per rank, then many calls of one with 2: the executor's pool
keeps 31 threads, and the 30 the 2-worker calls do not use wake for each of them. One that woke
after its call had ended read the call as gone (a null pointer) and crashed the rank (SIGSEGV),
found by running the generated forest plans of one topology one after another.

argv[1]: a directory for the plans; argv[2]: how many 2-worker calls. Prints "OK <rank> <calls>"."""
import sys

import numpy as np

import forestcc
from forestcc.plan import PlanBuilder, dumps, verify


def plan(workers: int) -> dict:
    """An all_gather on 2 ranks whose worker j moves chunk j over a channel pair of its own."""
    b = PlanBuilder("all_gather", nranks=2, chunks_per_block=workers)
    pairs = [b.channel_pair(0, 1) for _ in range(workers)]
    made = {r: [b.worker(r) for _ in range(workers)] for r in range(2)}
    for r in range(2):
        for j in range(workers):
            ch, w = pairs[j][r], made[r][j]
            b.copy(r, w, ("input", j), ("output", r * workers + j))
            b.signal(r, w, ch)
            b.wait(r, w, ch)
            b.put_signal(r, w, ch, ("input", j), ("output", r * workers + j))
            b.wait(r, w, ch)
    p = b.build(generator="test-worker-pool")
    p["name"] = f"all_gather_{workers}_workers"
    assert verify(p).ok, verify(p)
    return p


shared, calls = sys.argv[1], int(sys.argv[2])
comm = forestcc.init()
r, n = comm.rank, comm.size
paths = {}
for workers in (32, 2):
    paths[workers] = f"{shared}/workers{workers}.json"
    if r == 0:
        with open(paths[workers], "w") as f:
            f.write(dumps(plan(workers)))
comm.barrier()
count = 64
want = np.concatenate([np.arange(count, dtype=np.int64) + 1000 * q for q in range(n)])
for i, path in enumerate([paths[32]] + [paths[2]] * calls):
    x = np.arange(count, dtype=np.int64) + 1000 * r
    out = np.zeros(n * count, np.int64)
    comm.all_gather(out, x, algo=path)
    assert np.array_equal(out, want), f"call {i}: {out[:4]}"
print("OK", r, calls, flush=True)
