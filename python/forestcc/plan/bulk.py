"""Work on plans of millions of objects: Python's cyclic garbage collector paused meanwhile.

Compiling, loading or verifying a 1,024-rank forest plan creates tens of millions of dicts and
lists that stay alive (the plan's ops, the verifier's chunk records and clocks). The cyclic
collector runs every few hundred allocations and, each time the long-lived objects have grown by
a quarter, traverses all of them again: about a quarter of the CPU time of compiling a 256-rank
all_reduce plan, more at 1,024 ranks. None of this work needs the collector (reference counting
frees what it drops; the few cycles, such as the compiler's segments, are collected after), so
it runs with the collector paused.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic collector off inside the block, back as it was after (nested blocks are fine)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
