"""The collectives, datatypes and reduction ops forestcc-perf knows, with nccl-tests' names.

A collective's ``count`` is the nccl-tests count parameter: elements per rank for all_gather,
reduce_scatter, gather and scatter, per peer for all_to_all, and the whole buffer otherwise.
The table's size column is the larger buffer in bytes (count × n × element size for the
chunked collectives), which is also the S of algbw = S / t.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Collective:
    name: str            # forestcc's method name
    binary: str          # nccl-tests' binary name
    reduces: bool        # takes a reduction op (else the redop column says "none")
    rooted: bool         # takes a root (else the root column says -1)
    send_chunks: bool    # the send buffer holds n chunks of count elements
    recv_chunks: bool    # the receive buffer holds n chunks of count elements
    in_place: bool       # has an in-place form

    @property
    def chunked(self) -> bool:
        return self.send_chunks or self.recv_chunks

    def send_elements(self, count: int, nranks: int) -> int:
        return count * nranks if self.send_chunks else count

    def recv_elements(self, count: int, nranks: int) -> int:
        return count * nranks if self.recv_chunks else count

    def count_for_size(self, size_bytes: int, itemsize: int, nranks: int) -> int:
        """The count parameter for a requested size, rounded down as nccl-tests does."""
        elements = size_bytes // itemsize
        return elements // nranks if self.chunked else elements

    def in_place_offsets(self, count: int, rank: int) -> tuple[int, int]:
        """Element offsets of the send and receive views inside the one in-place buffer
        (NCCL's convention: the smaller buffer is this rank's chunk of the larger)."""
        if self.recv_chunks and not self.send_chunks:   # all_gather, gather
            return rank * count, 0
        if self.send_chunks and not self.recv_chunks:   # reduce_scatter, scatter
            return 0, rank * count
        return 0, 0


# nccl-tests' binary name of each collective forestcc-perf measures.
BINARIES = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
            "reduce_scatter": "reduce_scatter_perf", "all_to_all": "alltoall_perf",
            "broadcast": "broadcast_perf", "reduce": "reduce_perf", "gather": "gather_perf",
            "scatter": "scatter_perf", "sendrecv": "sendrecv_perf"}

# Buffer roles, rooted, reducing and in-place form: (reduces, rooted, send_chunks, recv_chunks,
# in_place). They come from forestcc's one table of collectives (forestcc/plan.hpp,
# _C.collective_table()); these rows only serve the other backends where forestcc's native module
# is not built, and tests/test_perf_cli.py checks that they equal the table.
_WITHOUT_NATIVE = {
    "all_reduce": (True, False, False, False, True),
    "all_gather": (False, False, False, True, True),
    "reduce_scatter": (True, False, True, False, True),
    "all_to_all": (False, False, True, True, True),
    "broadcast": (False, True, False, False, True),
    "reduce": (True, True, False, False, True),
    "gather": (False, True, False, True, False),
    "scatter": (False, True, True, False, False),
    "sendrecv": (False, False, False, False, False),
}


def table_rows() -> dict[str, tuple[bool, bool, bool, bool, bool]]:
    """The rows above, from forestcc's native table when it is built."""
    try:
        from forestcc import _C
    except ImportError:
        return dict(_WITHOUT_NATIVE)
    return {row["name"]: (row["reduces"], row["rooted"], row["input"] == "per_rank",
                          row["output"] == "per_rank", row["in_place"])
            for row in _C.collective_table() if row["name"] in BINARIES}


COLLECTIVES = {name: Collective(name, BINARIES[name], *row) for name, row in table_rows().items()}

# Other spellings users type: nccl-tests binaries and their short forms.
COLLECTIVE_ALIASES = {c.binary: c.name for c in COLLECTIVES.values()}
COLLECTIVE_ALIASES.update({c.binary.removesuffix("_perf"): c.name for c in COLLECTIVES.values()})
COLLECTIVE_ALIASES.update({"allreduce": "all_reduce", "allgather": "all_gather",
                           "reducescatter": "reduce_scatter", "alltoall": "all_to_all"})


def find_collective(name: str) -> Collective | None:
    key = name.strip().lower()
    return COLLECTIVES.get(COLLECTIVE_ALIASES.get(key, key))


@dataclass(frozen=True)
class DataType:
    name: str            # nccl-tests' name, printed in the type column
    itemsize: int
    host: np.dtype       # numpy type holding the values on the host (checks compare in it)
    native_numpy: bool   # numpy has this exact type (else only libraries with their own do)


DATATYPES = {t.name: t for t in (
    DataType("int8", 1, np.dtype(np.int8), True),
    DataType("uint8", 1, np.dtype(np.uint8), True),
    DataType("int32", 4, np.dtype(np.int32), True),
    DataType("uint32", 4, np.dtype(np.uint32), True),
    DataType("int64", 8, np.dtype(np.int64), True),
    DataType("uint64", 8, np.dtype(np.uint64), True),
    DataType("half", 2, np.dtype(np.float16), True),
    DataType("float", 4, np.dtype(np.float32), True),
    DataType("double", 8, np.dtype(np.float64), True),
    # numpy has none of these: a backend with its own type (torch) keeps them, the host holds
    # float32 copies; the check values are small integers, exact in all of them.
    DataType("bfloat16", 2, np.dtype(np.float32), False),
    DataType("f8e4m3", 1, np.dtype(np.float32), False),
    DataType("f8e5m2", 1, np.dtype(np.float32), False),
)}

DATATYPE_ALIASES = {"char": "int8", "int": "int32", "uint": "uint32", "float16": "half",
                    "fp16": "half", "float32": "float", "fp32": "float", "float64": "double",
                    "fp64": "double", "bf16": "bfloat16", "fp8_e4m3": "f8e4m3",
                    "fp8_e5m2": "f8e5m2"}


def find_datatype(name: str) -> DataType | None:
    key = name.strip().lower()
    return DATATYPES.get(DATATYPE_ALIASES.get(key, key))


# nccl-tests' ops; "mulsum" is NCCL's pre-multiplied sum, which no backend here offers yet.
OPS = ("sum", "prod", "max", "min", "avg", "mulsum")
