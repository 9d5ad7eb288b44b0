"""Where a chunk lives: buffer sizes per collective, chunk -> element/byte ranges, slices, aliasing.

A collective has a base count ``c`` (elements per block):

=================================  =====================  =========  ==========
collective                         c is                   input      output
=================================  =====================  =========  ==========
all_reduce, broadcast, reduce      the whole vector       1 block    1 block
all_gather, gather                 per-rank input count   1 block    N blocks
reduce_scatter, scatter            per-rank output count  N blocks   1 block
all_to_all                         per-peer count         N blocks   N blocks
sendrecv                           the message count      1 block    1 block
barrier                            (no data)              0          0
=================================  =====================  =========  ==========

Each block is split into ``k = chunks_per_block`` chunks. Chunk ``i`` of a buffer is part
``i % k`` of block ``i // k`` and covers elements
``[b*c + floor(p*c/k), b*c + floor((p+1)*c/k))``. Consecutive chunks are adjacent, so ``n``
contiguous chunks starting at ``i`` are one element range. Scratch uses the same geometry.
"""
from __future__ import annotations

from typing import Callable

from . import ops

# collective -> (input blocks, output blocks); "N" stands for nranks blocks.
_BLOCKS = {
    ops.ALL_REDUCE: (1, 1),
    ops.BROADCAST: (1, 1),
    ops.REDUCE: (1, 1),
    ops.SENDRECV: (1, 1),
    ops.ALL_GATHER: (1, "N"),
    ops.GATHER: (1, "N"),
    ops.REDUCE_SCATTER: ("N", 1),
    ops.SCATTER: ("N", 1),
    ops.ALL_TO_ALL: ("N", "N"),
    ops.BARRIER: (0, 0),
}


def buffer_blocks(collective: str, nranks: int) -> tuple[int, int]:
    """(input blocks, output blocks) of one rank for a collective over nranks ranks."""
    def blocks(spec):
        return nranks if spec == "N" else spec
    inp, out = _BLOCKS[collective]
    return blocks(inp), blocks(out)


def expected_buffer_chunks(collective: str, nranks: int, chunks_per_block: int) -> dict:
    """{"input": chunks, "output": chunks} a plan must declare (scratch is free)."""
    inp, out = buffer_blocks(collective, nranks)
    return {ops.INPUT: inp * chunks_per_block, ops.OUTPUT: out * chunks_per_block}


def chunk_element_range(index: int, count: int, c: int, k: int) -> tuple[int, int]:
    """Elements [start, end) covered by chunks index .. index+count-1 (block count c, k parts)."""
    def start_of(i):
        block, part = divmod(i, k)
        return block * c + (part * c) // k
    return start_of(index), start_of(index + count)


def chunk_byte_range(index: int, count: int, c: int, k: int, elem_size: int) -> tuple[int, int]:
    """(byte offset, byte length) of chunks index .. index+count-1 within their buffer."""
    start, end = chunk_element_range(index, count, c, k)
    return start * elem_size, (end - start) * elem_size


def buffer_bytes(chunks: int, c: int, k: int, elem_size: int) -> int:
    """Size in bytes of a buffer that holds the given number of chunks."""
    return chunk_element_range(0, chunks, c, k)[1] * elem_size


def slice_count(max_slices: int, min_slice_bytes: int, c: int, k: int, elem_size: int) -> int:
    """How many slices the executor runs: as many as allowed while the smallest chunk's slices
    stay >= min_slice_bytes, at least 1. Chunks in a block differ by at most one element, so the
    smallest chunk holds floor(c/k) elements."""
    smallest_chunk_bytes = (c // k) * elem_size
    if min_slice_bytes <= 0:
        return max(1, max_slices)
    return max(1, min(max_slices, smallest_chunk_bytes // min_slice_bytes))


def slice_element_range(start: int, end: int, s: int, slices: int) -> tuple[int, int]:
    """Slice s of `slices` balanced sub-ranges of elements [start, end)."""
    length = end - start
    return start + (s * length) // slices, start + ((s + 1) * length) // slices


def op_slice_byte_ranges(index: int, count: int, c: int, k: int, elem_size: int,
                         s: int, slices: int) -> list:
    """(byte offset, byte length) pieces an op on chunks index..index+count-1 touches in slice s.

    Every chunk is sliced on its own, so with more than one slice an op of n chunks touches
    n separate ranges (adjacent ranges are merged)."""
    if slices == 1:
        return [chunk_byte_range(index, count, c, k, elem_size)]
    pieces: list = []
    for i in range(index, index + count):
        lo, hi = slice_element_range(*chunk_element_range(i, 1, c, k), s, slices)
        if pieces and pieces[-1][0] + pieces[-1][1] == lo * elem_size:
            pieces[-1] = (pieces[-1][0], pieces[-1][1] + (hi - lo) * elem_size)
        else:
            pieces.append((lo * elem_size, (hi - lo) * elem_size))
    return pieces


# ----------------------------------------------------------------------------- aliasing

# In-place collectives where the input is the whole output buffer.
_INPUT_IS_OUTPUT = frozenset({ops.ALL_REDUCE, ops.BROADCAST, ops.REDUCE, ops.ALL_TO_ALL,
                              ops.SENDRECV})
# In-place collectives where the input is block <rank> of the output.
_INPUT_IN_OUTPUT = frozenset({ops.ALL_GATHER, ops.GATHER})
# In-place collectives where the output is block <rank> of the input.
_OUTPUT_IN_INPUT = frozenset({ops.REDUCE_SCATTER, ops.SCATTER})


# How the buffers alias, as alias_kind names it (0: not at all). The numbers are what the
# verifier's C++ scan of a plan's accesses (_C.plan.co_access) takes.
ALIAS_NONE, INPUT_IS_OUTPUT, INPUT_IN_OUTPUT, OUTPUT_IN_INPUT = 0, 1, 2, 3


def alias_kind(collective: str, in_place: bool) -> int:
    """Which buffer aliases which (see alias_function): one of ALIAS_NONE, INPUT_IS_OUTPUT,
    INPUT_IN_OUTPUT (input is block <rank> of output), OUTPUT_IN_INPUT (the reverse)."""
    if not in_place or collective == ops.BARRIER:
        return ALIAS_NONE
    if collective in _INPUT_IS_OUTPUT:
        return INPUT_IS_OUTPUT
    if collective in _INPUT_IN_OUTPUT:
        return INPUT_IN_OUTPUT
    if collective in _OUTPUT_IN_INPUT:
        return OUTPUT_IN_INPUT
    raise ValueError(f"unknown collective {collective!r}")


def alias_function(collective: str, in_place: bool, rank: int,
                   k: int) -> Callable[[str, int], tuple[str, int]]:
    """Map a (buffer, chunk) reference on `rank` to the memory it names.

    Out of place, every buffer is its own memory. In place, one buffer aliases the other:
    all_reduce/broadcast/reduce/all_to_all/sendrecv: input is output; all_gather/gather: input
    is block <rank> of output; reduce_scatter/scatter: output is block <rank> of input.
    """
    kind = alias_kind(collective, in_place)
    if kind == ALIAS_NONE:
        return lambda buffer, index: (buffer, index)
    if kind == INPUT_IS_OUTPUT:
        return lambda buffer, index: (ops.OUTPUT if buffer == ops.INPUT else buffer, index)
    offset = rank * k
    if kind == INPUT_IN_OUTPUT:
        return lambda buffer, index: ((ops.OUTPUT, index + offset) if buffer == ops.INPUT
                                      else (buffer, index))
    return lambda buffer, index: ((ops.INPUT, index + offset) if buffer == ops.OUTPUT
                                  else (buffer, index))
