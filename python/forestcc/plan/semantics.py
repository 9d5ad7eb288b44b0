"""What each collective must leave in the output buffers, as symbolic chunk contents.

Rank r's input chunk i starts as the symbol (r, i). A chunk's content is a multiset of symbols,
kept as a sorted tuple: a copy moves a content unchanged, a reduction concatenates the
contents of its operands. The reduction operator (sum, max, ...) is chosen at run time, so a
correct plan must combine exactly the right symbols, each exactly once.

``expected_outputs`` gives, per rank, one entry per output chunk: the required content, or
None where the collective leaves the chunk unspecified (non-root outputs of reduce and gather).
"""
from __future__ import annotations

from . import ops

Symbol = tuple[int, int]             # (rank, input chunk index)
Content = tuple[Symbol, ...]         # sorted multiset of symbols


def input_symbol(rank: int, index: int) -> Content:
    """Content of rank's input chunk `index` before the collective runs."""
    return ((rank, index),)


def combine(contents) -> Content:
    """Content of an elementwise reduction over the given contents."""
    merged: list = []
    for content in contents:
        merged.extend(content)
    merged.sort()
    return tuple(merged)


def _sum_over_ranks(nranks: int, index: int) -> Content:
    return tuple((q, index) for q in range(nranks))


def expected_outputs(collective: str, nranks: int, k: int, rank: int,
                     root: int | None = None) -> list[Content | None]:
    """Required content of each output chunk of `rank` (None: unspecified).

    Block b part p means output chunk b*k + p.

    - all_reduce: chunk i = {(q, i) for every rank q}.
    - all_gather: block b part p = (b, p).
    - reduce_scatter: part p of rank r = {(q, r*k + p) for every q}.
    - all_to_all: block b part p of rank r = (b, r*k + p).
    - broadcast: chunk i = (root, i) on every rank.
    - reduce: at root, chunk i = {(q, i) for every q}; elsewhere unspecified.
    - gather: at root, block b part p = (b, p); elsewhere unspecified.
    - scatter: part p of rank r = (root, r*k + p).
    - sendrecv (a ring shift): chunk i of rank r = ((r - 1) mod N, i).
    - barrier: no data.
    """
    n = nranks
    if collective == ops.ALL_REDUCE:
        return [_sum_over_ranks(n, i) for i in range(k)]
    if collective == ops.ALL_GATHER:
        return [input_symbol(b, p) for b in range(n) for p in range(k)]
    if collective == ops.REDUCE_SCATTER:
        return [_sum_over_ranks(n, rank * k + p) for p in range(k)]
    if collective == ops.ALL_TO_ALL:
        return [input_symbol(b, rank * k + p) for b in range(n) for p in range(k)]
    if collective == ops.BROADCAST:
        return [input_symbol(root, i) for i in range(k)]
    if collective == ops.REDUCE:
        if rank != root:
            return [None] * k
        return [_sum_over_ranks(n, i) for i in range(k)]
    if collective == ops.GATHER:
        if rank != root:
            return [None] * (n * k)
        return [input_symbol(b, p) for b in range(n) for p in range(k)]
    if collective == ops.SCATTER:
        return [input_symbol(root, rank * k + p) for p in range(k)]
    if collective == ops.SENDRECV:
        return [input_symbol((rank - 1) % n, i) for i in range(k)]
    if collective == ops.BARRIER:
        return []
    raise ValueError(f"unknown collective {collective!r}")


def describe(content: Content | None) -> str:
    """Short human form of a content: 'r0[3]' or 'sum(r0[3], r1[3])', 'undefined' for None."""
    if content is None:
        return "undefined"
    terms = [f"r{r}[{i}]" for r, i in content]
    if len(terms) == 1:
        return terms[0]
    if len(terms) > 8:
        terms = terms[:8] + [f"... {len(content)} terms"]
    return "sum(" + ", ".join(terms) + ")"
