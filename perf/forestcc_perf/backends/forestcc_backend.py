"""forestcc itself: the collectives of the communicator ``forestcc.init()`` returns.

The calls are the torch.distributed-style methods (``all_reduce(x, op=, out=)``,
``all_gather(out, x)``, ``broadcast(x, root)``, ...) with ``algo=`` when --algo is given (or
while --tune sweeps the built-in algorithms). broadcast is in place only: out of place, the root
broadcasts from its send buffer and the others receive into their receive buffers, as in
nccl-tests. sendrecv is a ring of blocking ``send``/``recv`` (a rendezvous).

--memory picks the buffers: ``numpy`` (ordinary arrays; peers reach them by single-copy
cross-process reads) or ``forestcc`` (``forestcc.empty``: shared memory that same-node peers map,
so plans move data with plain loads and stores). Under ``mpirun`` the communicator's id travels
through mpi4py when the mpi backend is in the same launch (it is created first).
"""
from __future__ import annotations

import copy
import os
import pickle
import struct
from typing import Any

import numpy as np

from forestcc_perf.backends.base import Backend, BackendUnavailable
from forestcc_perf.collectives import Collective, DataType

MEMORY_KINDS = ("numpy", "forestcc")
BUILD_HINT = "pip install -e . (or tools/dev-install.sh in a checkout)"


def unavailable_reason() -> str | None:
    """Why the forestcc backend cannot run here (checked without joining a job), or None."""
    try:
        import forestcc
        from forestcc import _C  # noqa: F401  (the native module: collectives live there)
    except ImportError as e:
        return f"forestcc's native module is not built or not importable ({e}): {BUILD_HINT}"
    if not callable(getattr(forestcc.Communicator, "all_reduce", None)):
        return "forestcc collectives are not available in this version"
    return None


def builtin_algorithms() -> dict[str, list[str]]:
    """Built-in algorithm name -> the collectives it generates (forestcc's own list)."""
    from forestcc import _C
    return {name: list(colls) for name, colls in _C.plan.algorithms()}


def algorithm_max_bytes(algo: str, collective: str, nranks: int) -> int | None:
    """The largest message a built-in algorithm serves (None: no limit, or not built in)."""
    from forestcc import _C
    if collective not in builtin_algorithms().get(algo, ()):
        return None
    return _C.plan.algorithm_max_bytes(algo, collective, nranks)


def _bfloat16() -> np.dtype | None:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


class ForestccBackend(Backend):
    name = "forestcc"
    ops = frozenset({"sum", "prod", "max", "min", "avg"})
    datatypes = frozenset({"int8", "uint8", "int32", "uint32", "int64", "uint64", "half",
                           "float", "double"})

    def __init__(self, algo: str | None = None, memory: str = "numpy") -> None:
        reason = unavailable_reason()
        if reason:
            raise BackendUnavailable(reason)
        if memory not in MEMORY_KINDS:
            raise BackendUnavailable(f"--memory {memory!r}: choose from {', '.join(MEMORY_KINDS)}")
        import forestcc
        self.forestcc = forestcc
        self.comm = forestcc.init()
        self.rank, self.size = self.comm.rank, self.comm.size
        self.memory = memory
        self._bf16 = _bfloat16()
        if self._bf16 is not None:   # numpy's bfloat16 comes from ml_dtypes
            self.datatypes = self.datatypes | {"bfloat16"}
        self.set_algo(algo)

    def set_algo(self, algo: str | None) -> None:
        self.algo = algo
        self._algo = algo or "auto"   # passed positionally, as the mpi backend passes its own

    def with_algo(self, algo: str | None) -> ForestccBackend:
        """This backend (the same communicator) calling every collective with ``algo``."""
        other = copy.copy(self)
        other.set_algo(algo)
        return other

    def version(self) -> str:
        return f"forestcc {self.forestcc.__version__}, {self.memory} memory"

    def unsupported(self, coll: Collective, dtype: DataType, op: str | None) -> str | None:
        if coll.name == "sendrecv" and self.size == 1:
            return "sendrecv on backend forestcc needs at least 2 ranks"
        return super().unsupported(coll, dtype, op)

    def supports_in_place(self, coll: Collective, in_place: bool) -> bool:
        # forestcc's gather and scatter are out of place (the root's buffers may not overlap);
        # a send and a receive on one buffer would race (the table says which have the form)
        return coll.in_place or not in_place

    # -- buffers -----------------------------------------------------------------------------------
    def _dtype(self, dtype: DataType) -> np.dtype:
        return self._bf16 if dtype.name == "bfloat16" else dtype.host

    def empty(self, n: int, dtype: DataType) -> Any:
        if self.memory == "forestcc":
            return self.forestcc.empty(n, self._dtype(dtype))
        return np.empty(n, self._dtype(dtype))

    def to_host(self, buf: Any) -> np.ndarray:
        if self._bf16 is not None and buf.dtype == self._bf16:
            return buf.astype(np.float32)   # the check compares bfloat16 in float32 (exact)
        return buf

    def write(self, buf: Any, values: np.ndarray) -> None:
        buf[...] = values.astype(buf.dtype, copy=False)

    # -- communication -----------------------------------------------------------------------------
    def run(self, coll: Collective, send: Any, recv: Any, op: str, root: int,
            in_place: bool) -> Any:
        comm, rank, algo, name = self.comm, self.rank, self._algo, coll.name
        if name == "all_reduce":
            if in_place:
                comm.all_reduce(recv, op, None, algo)
            else:
                comm.all_reduce(send, op, recv, algo)
            return recv
        if name == "all_gather":
            comm.all_gather(recv, send, algo)
            return recv
        if name == "reduce_scatter":
            comm.reduce_scatter(recv, send, op, algo)
            return recv
        if name == "all_to_all":
            comm.all_to_all(recv, send, algo)
            return recv
        if name == "broadcast":
            buf = send if (rank == root and not in_place) else recv
            comm.broadcast(buf, root, algo)
            return buf
        if name == "reduce":
            if in_place:
                comm.reduce(recv, root, op, None, algo)
            else:
                comm.reduce(send, root, op, recv, algo)
            return recv if rank == root else None
        if name == "gather":
            comm.gather(recv, send, root, algo)
            return recv if rank == root else None
        if name == "scatter":
            comm.scatter(recv, send, root, algo)
            return recv
        if name == "sendrecv":
            nxt, prev = (rank + 1) % self.size, (rank - 1) % self.size
            # blocking send (a rendezvous) and receive: even ranks send first, so a ring of any
            # length completes (the last even rank's send waits for rank 0's receive)
            if rank % 2 == 0:
                comm.send(send, nxt)
                comm.recv(recv, prev)
            else:
                comm.recv(recv, prev)
                comm.send(send, nxt)
            return recv
        raise ValueError(f"backend forestcc: no collective {name}")

    def barrier(self) -> None:
        self.comm.barrier()   # the benchmark's own sync: never the algorithm under test

    def allreduce_number(self, value: float, op: str) -> float:
        # Through the bootstrap, not a collective plan: the #wrong sums and the times must not
        # depend on the algorithm under test (a broken one would hide its own errors).
        values = [struct.unpack("<d", b)[0]
                  for b in self.comm.all_gather_bytes(struct.pack("<d", value))]
        return {"sum": sum, "min": min, "max": max}[op](values)

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [pickle.loads(b) for b in self.comm.all_gather_bytes(pickle.dumps(obj))]

    def abort(self, code: int) -> None:
        try:
            self.comm.abort(f"forestcc-perf failed on rank {self.rank}")
        finally:
            os._exit(code)
