"""Ranks that disagree on a call: every rank either returns exactly the right answer for the call
it made (as if every rank had made it) or raises MismatchError; none returns wrong data, none
writes outside its buffers, none waits for the timeout.

argv[1]: a JSON list of cases [base, other, ranks]: the ranks listed call `other`, the rest
`base`. A call is {"coll": ..., "count": c, "dtype": ..., "op": ..., "root": r, "algo": ...,
"in_place": bool}; missing keys take the defaults below. Each case runs on a fresh communicator
(split from the world, which a mismatch poisons). Prints "CASE <i> <OK|RAISED|WRONG|GUARD|OTHER>
<detail>" per case.
"""
import json
import sys

import ml_dtypes  # noqa: F401 - bfloat16 dtype for numpy
import numpy as np

import forestcc
from forestcc.errors import MismatchError

DEFAULT = {"coll": "all_reduce", "count": 1000, "dtype": "float32", "op": "sum", "root": 0,
           "algo": "auto", "in_place": False}
GUARD = 8           # elements after every buffer that no call may touch
SENTINEL = 77
REDUCE = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}


def value(rank: int, n: int, dtype) -> np.ndarray:
    """Rank `rank`'s input: small integers, exact in every dtype and under every op."""
    return ((np.arange(n) % 3) + rank + 1).astype(dtype)


def padded(n: int, dtype, fill=0):
    """An array of n elements followed by GUARD sentinels; returns (view, whole)."""
    whole = np.full(n + GUARD, SENTINEL, dtype=dtype)
    whole[:n] = fill
    return whole[:n], whole


def inputs(call, rank, size):
    """The x this rank passes, and the length of the output the call fills."""
    c, coll = call["count"], call["coll"]
    per_rank_in = {"all_reduce": c, "broadcast": c, "reduce": c, "all_gather": c, "gather": c,
                   "reduce_scatter": c * size, "all_to_all": c * size, "scatter": c * size}
    per_rank_out = {"all_reduce": c, "broadcast": c, "reduce": c, "all_gather": c * size,
                    "gather": c * size, "reduce_scatter": c, "all_to_all": c * size, "scatter": c}
    return per_rank_in.get(coll, 0), per_rank_out.get(coll, 0)


def expected(call, rank, size):
    """What `call` leaves in the output on `rank` if every rank made it (None: not checked)."""
    coll, dt, c, root = call["coll"], np.dtype(call["dtype"]), call["count"], call["root"]
    n_in, _ = inputs(call, rank, size)
    xs = [value(r, n_in, dt) for r in range(size)]
    if coll == "all_reduce" or (coll == "reduce" and rank == root):
        op = REDUCE[call["op"]]
        out = xs[0].copy()
        for x in xs[1:]:
            out = op(out, x).astype(dt)
        return out
    if coll == "broadcast":
        return xs[root]
    if coll == "all_gather" or (coll == "gather" and rank == root):
        return np.concatenate(xs)
    if coll == "reduce_scatter":
        op = REDUCE[call["op"]]
        out = xs[0][rank * c:(rank + 1) * c].copy()
        for x in xs[1:]:
            out = op(out, x[rank * c:(rank + 1) * c]).astype(dt)
        return out
    if coll == "all_to_all":
        return np.concatenate([xs[j][rank * c:(rank + 1) * c] for j in range(size)])
    if coll == "scatter":
        return xs[root][rank * c:(rank + 1) * c]
    return None


def run(comm, call):
    """Makes `call` on this rank; returns (result array or None, [whole buffers to guard-check])."""
    rank, size = comm.rank, comm.size
    coll, dt = call["coll"], np.dtype(call["dtype"])
    n_in, n_out = inputs(call, rank, size)
    x, xw = padded(n_in, dt)
    x[:] = value(rank, n_in, dt)
    kw = {"algo": call["algo"]}
    if coll == "barrier":
        comm.barrier(**kw)
        return None, []
    if coll in ("all_reduce", "broadcast", "reduce"):
        if coll == "broadcast":
            comm.broadcast(x, call["root"], **kw)
            return x, [xw]
        out, ow = (x, xw) if call["in_place"] else padded(n_out, dt)
        args = {"op": call["op"], "out": None if call["in_place"] else out}
        if coll == "all_reduce":
            comm.all_reduce(x, **args, **kw)
        else:
            comm.reduce(x, call["root"], **args, **kw)
        return out, [xw, ow]
    out, ow = padded(n_out, dt)
    if coll == "all_gather":
        comm.all_gather(out, x, **kw)
    elif coll == "reduce_scatter":
        comm.reduce_scatter(out, x, op=call["op"], **kw)
    elif coll == "all_to_all":
        comm.all_to_all(out, x, **kw)
    elif coll == "gather":
        comm.gather(out, x, call["root"], **kw)
    elif coll == "scatter":
        comm.scatter(out, x, call["root"], **kw)
    else:
        raise ValueError(coll)
    return out, [xw, ow]


def main():
    world = forestcc.init()
    for i, (base, other, ranks) in enumerate(json.loads(sys.argv[1])):
        comm = world.split(0)
        call = {**DEFAULT, **(other if comm.rank in ranks else base)}
        try:
            out, wholes = run(comm, call)
        except MismatchError as e:
            print(f"CASE {i} RAISED {str(e)[:300]!r}", flush=True)
            continue
        except Exception as e:  # noqa: BLE001 - reported as a failure of the case
            print(f"CASE {i} OTHER {type(e).__name__}: {str(e)[:300]!r}", flush=True)
            continue
        if any((w[w.size - GUARD:] != SENTINEL).any() for w in wholes):
            print(f"CASE {i} GUARD {call}", flush=True)
            continue
        want = expected(call, comm.rank, comm.size)
        if want is not None and not np.array_equal(out, want):
            wrong = int((out != want).sum())
            print(f"CASE {i} WRONG {wrong} of {out.size} elements for {call}", flush=True)
            continue
        print(f"CASE {i} OK", flush=True)


main()
