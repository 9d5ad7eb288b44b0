"""A seeded random stream of calls, the same on every rank: collectives of every kind, sizes from 1
element to 4 MiB, every built-in algorithm, numpy and forestcc memory, send/recv rings and async
calls. It runs until something fails and then prints one line, "FAILED <exception type>: <message>",
and exits 3; a call refused for its arguments (an algorithm that does not implement it, an eager
plan given too much data) is refused on every rank alike and skipped.
After READY_AFTER calls it creates DIR/ready.<rank> (so the test knows the stream is under way).

usage: random_calls.py SEED DIR [DIVERGE_AT DIVERGE_RANK]
  DIVERGE_AT/DIVERGE_RANK: at that call, that rank alone passes one more element (a collective of
  another size than the other ranks'): every rank must raise (MismatchError, or AbortedError
  naming the mismatch), not return."""
import os
import random
import sys

import numpy as np

import forestcc

READY_AFTER = 200
MAX_CALLS = 200_000  # a bound, so that a test that fails to stop the stream does not leave it running

seed, folder = int(sys.argv[1]), sys.argv[2]
diverge_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
diverge_rank = int(sys.argv[4]) if len(sys.argv) > 4 else -1
comm = forestcc.init()
n, me = comm.size, comm.rank
rng = random.Random(seed)
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "barrier",
               "send_recv", "async"]
DATA_COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce"]
ALGOS = ["auto", "ring", "direct", "eager", "tree", "halving_doubling", "bruck"]


def make(count: int, memory: str):
    return forestcc.empty(count, dtype=np.float32) if memory == "forestcc" else np.empty(count, np.float32)


def call(c: str, count: int, memory: str, algo: str, root: int) -> None:
    if c == "all_reduce":
        x = make(count, memory)
        x[:] = me
        comm.all_reduce(x, algo=algo)
    elif c == "all_gather":
        x, out = make(count, memory), make(count * n, memory)
        x[:] = me
        comm.all_gather(out, x, algo=algo)
    elif c == "reduce_scatter":
        x, out = make(count * n, memory), make(count, memory)
        x[:] = 1
        comm.reduce_scatter(out, x, algo=algo)
    elif c == "all_to_all":
        x, out = make(count * n, memory), make(count * n, memory)
        x[:] = me
        comm.all_to_all(out, x, algo=algo)
    elif c == "broadcast":
        comm.broadcast(make(count, memory), root=root, algo=algo)
    elif c == "reduce":
        x = make(count, memory)
        x[:] = 1
        comm.reduce(x, root=root, algo=algo)
    elif c == "barrier":
        comm.barrier()
    elif c == "send_recv":
        comm.send_recv([(make(count, memory), (me + 1) % n)], [(make(count, memory), (me - 1) % n)])
    else:  # async
        comm.all_reduce(make(count, memory), async_op=True).wait()


done = 0
try:
    for i in range(MAX_CALLS):
        c = rng.choice(COLLECTIVES)
        count = rng.choice([1, 7, 1024, 65536, 1 << 20])
        memory = rng.choice(["numpy", "forestcc"])
        algo = rng.choice(ALGOS)
        root = rng.randrange(n)
        if i == diverge_at:
            # a call every rank makes (auto serves every collective), one element longer here
            c, algo = DATA_COLLECTIVES[i % len(DATA_COLLECTIVES)], "auto"
            if me == diverge_rank:
                count += 1
        try:
            call(c, count, memory, algo, root)
        except ValueError as e:
            # An argument refusal (an algorithm that does not implement the collective, an eager
            # plan given too much data) is made before anything is sent, alike on every rank
            # of this stream; a failure between ranks is a ForestccError.
            if isinstance(e, forestcc.ForestccError):
                raise
        done += 1
        if done == READY_AFTER:
            open(os.path.join(folder, f"ready.{me}"), "w").close()
except Exception as e:  # noqa: BLE001 - the line the test reads, whatever failed
    print(f"FAILED {type(e).__name__} after {done} calls: {e}", flush=True)
    sys.exit(3)
print(f"FINISHED {done} calls", flush=True)
