"""The executor's tiled reductions (schedules/README.md, "Tiled reductions"): a get_reduce chain and
the puts of its result run 256 KiB at a time. Rank 0 prints "TILED OK <cases>".

1. direct reduce_scatter, all_reduce and reduce on many tiles and a ragged last one, against numpy:
   private (numpy) and mapped (forestcc.empty) memory, in and out of place, several dtypes.
2. (2 ranks) A plan whose put lands on the peer one chunk past the range its get_reduce reads
   there, with chunks of several tiles: run tile by tile, the put's first tile would overwrite bytes
   the get has yet to read. The executor must see the overlap and run the ops one by one, so the
   result is still the sum. Its scratch is mapped on one node, or reached by cross-process copies
   under FORESTCC_TRANSPORT=cma (the test runs both).
"""
import json
import os
import sys
import tempfile

import numpy as np

import forestcc

comm = forestcc.init()
N, R = comm.size, comm.rank
TILE = 256 << 10
checked = 0


def values(count, dtype, rank):
    """Small integers (exact in every dtype, whatever the order of the sum) that differ per rank."""
    return ((np.arange(count) * (rank + 3) + rank) % 17).astype(dtype)


def array(count, dtype, mapped):
    return forestcc.empty(count, dtype) if mapped else np.empty(count, dtype)


def expect(count, dtype, reduce=np.add):
    out = values(count, dtype, 0)
    for r in range(1, N):
        out = reduce(out, values(count, dtype, r))
    return out


for mapped in (False, True):
    for dtype, op, fold in ((np.float32, "sum", np.add), (np.float16, "sum", np.add),
                            (np.int32, "max", np.maximum), (np.float64, "min", np.minimum)):
        elem = np.dtype(dtype).itemsize
        # Every rank's share spans several tiles and ends in a partial one.
        share = (3 * TILE + 5 * elem) // elem
        count = share * N
        for in_place in (False, True):
            x = array(count, dtype, mapped)
            x[:] = values(count, dtype, R)
            out = x if in_place else array(count, dtype, mapped)
            comm.all_reduce(x, op=op, out=None if in_place else out, algo="direct")
            assert np.array_equal(out, expect(count, dtype, fold)), ("all_reduce", mapped, dtype, op, in_place)
            x[:] = values(count, dtype, R)
            part = array(share, dtype, mapped)
            comm.reduce_scatter(part, x, op=op, algo="direct")
            assert np.array_equal(part, expect(count, dtype, fold)[R * share:(R + 1) * share]), (
                "reduce_scatter", mapped, dtype, op)
            root = N - 1
            x[:] = values(count, dtype, R)
            out = array(count, dtype, mapped)
            comm.reduce(x, root, op=op, out=out, algo="direct")
            if R == root:
                assert np.array_equal(out, expect(count, dtype, fold)), ("reduce", mapped, dtype, op)
            checked += 3


def shifted_put_plan(path):
    """all_reduce of 2 ranks through scratch (3 chunks of the whole vector). Each rank stages its
    input twice, in scratch chunks 0 and 1. Rank 0 reduces both chunks reading rank 1's, then puts
    them into rank 1's chunks 1-2: one chunk late, so its first tile lands where the get has yet to
    read. Each rank's output is the second reduced chunk (rank 0's chunk 1, rank 1's chunk 2)."""
    def op(name, **kw):
        return {"op": name, **kw}
    stage = [op("copy", src=["input", 0], dst=["scratch", 0]), op("copy", src=["input", 0], dst=["scratch", 1])]
    rank0 = stage + [op("wait", ch=0),
                     op("get_reduce", ch=0, src=["scratch", 0], dst=["scratch", 0], srcs=[["scratch", 0]], n=2),
                     op("put_signal", ch=0, src=["scratch", 0], dst=["scratch", 1], n=2),
                     op("copy", src=["scratch", 1], dst=["output", 0]),
                     op("wait", ch=0)]
    rank1 = stage + [op("signal", ch=0), op("wait", ch=0),
                     op("copy", src=["scratch", 2], dst=["output", 0]),
                     op("signal", ch=0)]
    plan = {"version": 1, "name": "shifted_put_all_reduce_2", "collective": "all_reduce", "nranks": 2,
            "in_place": False, "chunks_per_block": 1, "buffers": {"input": 1, "output": 1, "scratch": 3},
            "size_range": {"min_bytes": 0, "max_bytes": None}, "pipeline": {"max_slices": 1, "min_slice_bytes": 0},
            "provenance": {"generator": "tests/programs/tiled_reduce_check.py", "params": {},
                           "topology_fingerprint": None, "predicted_time_us": None},
            "ranks": [{"rank": r, "channels": [{"id": 0, "peer": 1 - r, "transport": "auto"}],
                       "workers": [{"id": 0, "ops": ops}]} for r, ops in ((0, rank0), (1, rank1))]}
    with open(path, "w") as fh:
        json.dump(plan, fh)


if N == 2:
    path = os.path.join(tempfile.gettempdir(), f"forestcc-shifted-put-{os.getpid()}.json")
    shifted_put_plan(path)
    count = 2 * TILE // 4  # chunks of two tiles of float32
    for mapped in (False, True):
        x = array(count, np.float32, mapped)
        x[:] = values(count, np.float32, R)
        out = array(count, np.float32, mapped)
        comm.all_reduce(x, out=out, algo=path)
        assert np.array_equal(out, expect(count, np.float32)), ("shifted put", mapped, np.flatnonzero(
            out != expect(count, np.float32))[:5])
        checked += 1
    os.unlink(path)

if R == 0:
    print("TILED OK", checked, flush=True)
sys.exit(0)
