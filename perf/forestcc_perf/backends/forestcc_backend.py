"""forestcc itself: the collectives of the communicator ``forestcc.init()`` returns.

The calls are the torch.distributed-style methods (``all_reduce(x, op=, out=)``,
``all_gather(out, x)``, ``broadcast(x, root)``, ...) with ``algo=`` when --algo is given. Where a
method takes no ``out=`` (reduce), the out-of-place column includes the copy into the receive
buffer. Buffers come from ``forestcc.empty`` (shared memory that same-node peers can map).
"""
from __future__ import annotations

import inspect
import os
import pickle
from typing import Any

import numpy as np

from forestcc_perf.backends.base import Backend, BackendUnavailable
from forestcc_perf.collectives import Collective, DataType

NOT_AVAILABLE = "forestcc collectives are not available in this version"


def collectives_available() -> bool:
    """True when forestcc's Communicator has the collective methods (checked on the class, so
    without joining a job)."""
    try:
        import forestcc
        return callable(getattr(forestcc.Communicator, "all_reduce", None))
    except Exception:   # an unbuilt native module is the same answer for the user
        return False


def _accepts(method: Any, keyword: str) -> bool:
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):   # a native method without a signature: assume it does
        return True
    return keyword in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class ForestccBackend(Backend):
    name = "forestcc"
    ops = frozenset({"sum", "prod", "max", "min", "avg"})
    datatypes = frozenset({"int8", "uint8", "int32", "uint32", "int64", "uint64", "half",
                           "float", "double"})

    def __init__(self, algo: str | None = None) -> None:
        if not collectives_available():
            raise BackendUnavailable(NOT_AVAILABLE)
        import forestcc
        self.forestcc = forestcc
        self.comm = forestcc.init()
        self.rank, self.size = self.comm.rank, self.comm.size
        self.algo = algo
        self._algo_kw = {"algo": algo} if algo else {}

    def version(self) -> str:
        return f"forestcc {self.forestcc.__version__}"

    def unsupported(self, coll: Collective, dtype: DataType, op: str | None) -> str | None:
        if not callable(getattr(self.comm, coll.name if coll.name != "sendrecv" else "send",
                                None)):
            return f"forestcc has no collective {coll.name} in this version"
        if coll.name == "sendrecv" and self.size == 1:
            return "sendrecv on backend forestcc needs at least 2 ranks"
        return super().unsupported(coll, dtype, op)

    def supports_in_place(self, coll: Collective, in_place: bool) -> bool:
        return not (in_place and coll.name == "sendrecv")   # one buffer both ways would race

    def empty(self, n: int, dtype: DataType) -> Any:
        return self.forestcc.empty(n, dtype.host)

    def run(self, coll: Collective, send: Any, recv: Any, op: str, root: int,
            in_place: bool) -> Any:
        comm, rank, kw, name = self.comm, self.rank, self._algo_kw, coll.name
        if name == "all_reduce":
            if in_place:
                comm.all_reduce(recv, op=op, **kw)
            else:
                comm.all_reduce(send, op=op, out=recv, **kw)
            return recv
        if name == "all_gather":
            comm.all_gather(recv, send, **kw)
            return recv
        if name == "reduce_scatter":
            comm.reduce_scatter(recv, send, op=op, **kw)
            return recv
        if name == "all_to_all":
            comm.all_to_all(recv, send, **kw)
            return recv
        if name == "broadcast":
            buf = send if (rank == root and not in_place) else recv
            comm.broadcast(buf, root, **kw)
            return buf
        if name == "reduce":
            if in_place:
                comm.reduce(recv, root, op=op, **kw)
            elif _accepts(comm.reduce, "out"):
                comm.reduce(send, root, op=op, out=recv, **kw)
            else:
                np.copyto(recv, send)
                comm.reduce(recv, root, op=op, **kw)
            return recv if rank == root else None
        if name == "gather":
            comm.gather(recv, send, root, **kw)
            return recv if rank == root else None
        if name == "scatter":
            comm.scatter(recv, send, root, **kw)
            return recv
        if name == "sendrecv":
            nxt, prev = (rank + 1) % self.size, (rank - 1) % self.size
            # blocking send and receive: even ranks send first so the ring cannot deadlock
            if rank % 2 == 0:
                comm.send(send, nxt)
                comm.recv(recv, prev)
            else:
                comm.recv(recv, prev)
                comm.send(send, nxt)
            return recv
        raise ValueError(f"backend forestcc: no collective {name}")

    def barrier(self) -> None:
        self.comm.barrier()

    def allreduce_number(self, value: float, op: str) -> float:
        buf = np.array([value], np.float64)
        self.comm.all_reduce(buf, op=op)
        return float(buf[0])

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [pickle.loads(b) for b in self.comm.all_gather_bytes(pickle.dumps(obj))]

    def abort(self, code: int) -> None:
        try:
            self.comm.abort(f"forestcc-perf failed on rank {self.rank}")
        finally:
            os._exit(code)
