"""Correctness: inputs whose reductions are exact, expected outputs computed independently, and
the #wrong count.

Every element's value is a small integer made from (seed, rank, element index), so a sum, product,
max or min over any number of ranks, in any order, is exact in every datatype (including half
and bfloat16): the check compares with tolerance 0, except avg (2 ulp: it divides). The expected
output is computed here in int64 from the formula, never from another rank's buffer.

Test hook: with ``FORESTCC_PERF_TEST_CORRUPT=1`` in the environment, :func:`count_wrong` adds 1 to
the first checked element before comparing, so tests can prove a broken collective is reported.
It is read only here and only for that purpose.
"""
from __future__ import annotations

import os

import numpy as np

from forestcc_perf.collectives import Collective, DataType

CORRUPT_ENV = "FORESTCC_PERF_TEST_CORRUPT"


def _values(kind: str, rank: int, nranks: int, index: np.ndarray, seed: int) -> np.ndarray:
    """int64 values of rank's elements at ``index`` for a reduction ``kind``."""
    if kind == "prod":
        # at most one rank per element contributes a factor above 1: the product stays <= 3
        # whatever the number of ranks, so int8 cannot overflow
        owner = (index + seed) % nranks
        return np.where(owner == rank, 1 + (index + seed) % 3, 1)
    if kind in ("max", "min"):
        return (index * 7 + rank * 11 + seed * 3) % 16 + 1
    if kind == "data":   # moved, not reduced: more distinct values catch misplaced chunks
        return (index * 3 + rank * 5 + seed * 7) % 13 + 1
    # sum and avg: each value <= 4, so the sum stays exact (<= 4n) in every type
    return (index * 3 + rank * 5 + seed * 7) % 4 + 1


def _kind(coll: Collective, op: str) -> str:
    return op if coll.reduces else "data"


def input_values(coll: Collective, op: str, dtype: DataType, rank: int, nranks: int,
                 count: int, seed: int) -> np.ndarray:
    """This rank's whole send buffer, in the host type."""
    index = np.arange(coll.send_elements(count, nranks), dtype=np.int64)
    return _values(_kind(coll, op), rank, nranks, index, seed).astype(dtype.host)


def _reduce(op: str, nranks: int, index: np.ndarray, seed: int) -> np.ndarray:
    acc = _values(op, 0, nranks, index, seed)
    for r in range(1, nranks):
        v = _values(op, r, nranks, index, seed)
        if op == "prod":
            acc = acc * v
        elif op == "max":
            acc = np.maximum(acc, v)
        elif op == "min":
            acc = np.minimum(acc, v)
        else:
            acc = acc + v
    return acc


def expected_output(coll: Collective, op: str, dtype: DataType, rank: int, nranks: int,
                    count: int, root: int, seed: int) -> np.ndarray | None:
    """What this rank's receive buffer must hold, in the host type; None where nothing is
    defined (the non-root ranks of reduce and gather)."""
    chunk = np.arange(count, dtype=np.int64)
    mine = rank * count + chunk               # this rank's chunk of an n-chunk buffer
    name = coll.name
    if name in ("reduce", "gather") and rank != root:
        return None
    if name in ("all_reduce", "reduce"):
        exact = _reduce(op, nranks, chunk, seed)
    elif name == "reduce_scatter":
        exact = _reduce(op, nranks, mine, seed)
    elif name in ("all_gather", "gather"):
        exact = np.concatenate([_values("data", r, nranks, chunk, seed) for r in range(nranks)])
    elif name == "all_to_all":   # chunk j of the output is rank j's chunk for this rank
        exact = np.concatenate([_values("data", r, nranks, mine, seed) for r in range(nranks)])
    elif name == "broadcast":
        exact = _values("data", root, nranks, chunk, seed)
    elif name == "scatter":
        exact = _values("data", root, nranks, mine, seed)
    elif name == "sendrecv":     # ring: receive from the previous rank
        exact = _values("data", (rank - 1) % nranks, nranks, chunk, seed)
    else:
        raise ValueError(f"no expected output for {name}")
    if op == "avg" and coll.reduces:
        if np.issubdtype(dtype.host, np.integer):
            return (exact // nranks).astype(dtype.host)
        return (exact / nranks).astype(dtype.host)
    return exact.astype(dtype.host)


def count_wrong(output: np.ndarray, expected: np.ndarray, op: str,
                dtype_name: str | None = None) -> int:
    """Elements of ``output`` that differ from ``expected`` (2 ulp allowed for float avg; the
    ulp of bfloat16, whose values are compared as float32, is 2**16 float32 ulps)."""
    if os.environ.get(CORRUPT_ENV) == "1" and output.size:
        output = output.copy()
        output[0] += 1
    if output.shape != expected.shape:
        raise ValueError(f"output has {output.size} elements, expected {expected.size}")
    if op == "avg" and np.issubdtype(expected.dtype, np.floating):
        wide = expected.astype(np.float64)
        tolerance = 2 * np.spacing(np.abs(expected)).astype(np.float64)
        if dtype_name == "bfloat16":   # 7 mantissa bits where float32 has 23
            tolerance *= 2.0 ** 16
        bad = ~(np.abs(output.astype(np.float64) - wide) <= tolerance)
        return int(np.count_nonzero(bad))
    return int(np.count_nonzero(output != expected))
