"""torch.distributed: the gloo process group on CPU tensors, and the nccl one on CUDA tensors.

Rendezvous: torchrun's env:// (MASTER_ADDR/MASTER_PORT) when set; otherwise a FileStore in /tmp
named after the launch (FORESTCC_JOB_ID under forestcc-run, PMIX_NAMESPACE under Open MPI,
the job and step under Slurm), or, failing those, a name broadcast through mpi4py. A file keeps
ports out of it, which is enough on one node; across nodes set MASTER_ADDR and MASTER_PORT.

torch's collectives are in place (all_reduce, reduce) or take lists; out-of-place columns
therefore include the copy into the receive buffer that a torch user would make.
"""
from __future__ import annotations

import datetime
import os
import sys
import uuid
from typing import Any

import numpy as np

from forestcc_perf.backends.base import (
    Backend,
    BackendUnavailable,
    job_key,
    launcher_rank,
    launcher_size,
    under_mpi_launcher,
)
from forestcc_perf.collectives import Collective, DataType

GLOO_INSTALL_HINT = "pip install torch==2.13.0 (the CPU wheel)"
NCCL_INSTALL_HINT = "pip install torch (a CUDA build)"
_TORCH_TYPES = {"int8": "int8", "uint8": "uint8", "int32": "int32", "int64": "int64",
                "half": "float16", "float": "float32", "double": "float64",
                "bfloat16": "bfloat16", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}


def _rendezvous() -> str:
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        return "env://"
    key = job_key()
    if key is None and under_mpi_launcher():
        try:
            from mpi4py import MPI
        except ImportError:
            MPI = None
        if MPI is not None:
            key = MPI.COMM_WORLD.bcast(uuid.uuid4().hex if MPI.COMM_WORLD.rank == 0 else None)
    if key is None:
        if launcher_size() == 1:
            key = f"single-{os.getpid()}"
        else:
            raise BackendUnavailable("torch.distributed needs a rendezvous: set MASTER_ADDR and "
                                     "MASTER_PORT (no launch id found in the environment)")
    return f"file:///tmp/forestcc-perf-torch-{key}"


class TorchBackend(Backend):
    def __init__(self, pg_backend: str = "gloo", timeout_s: float = 300.0) -> None:
        self.name = pg_backend
        hint = GLOO_INSTALL_HINT if pg_backend == "gloo" else NCCL_INSTALL_HINT
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            raise BackendUnavailable(f"backend {pg_backend} needs PyTorch: {hint}") from None
        self.torch, self.dist = torch, dist
        if pg_backend == "nccl":
            if not torch.cuda.is_available():
                raise BackendUnavailable("backend nccl needs an NVIDIA GPU: no GPU found "
                                         "(torch.cuda.is_available() is False)")
            self.device = "cuda"
            local = int(os.environ.get("LOCAL_RANK", os.environ.get("FORESTCC_LOCAL_RANK",
                        os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", launcher_rank()))))
            torch.cuda.set_device(local % torch.cuda.device_count())
        self.init_method = _rendezvous()
        kwargs = {}
        if self.init_method != "env://":
            kwargs = {"rank": launcher_rank(), "world_size": launcher_size()}
        dist.init_process_group(pg_backend, init_method=self.init_method,
                                timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        R = dist.ReduceOp
        self._ops = {"sum": R.SUM, "prod": R.PRODUCT, "max": R.MAX, "min": R.MIN}
        if pg_backend == "nccl":
            self._ops["avg"] = R.AVG
        self.ops = frozenset(self._ops)
        # newer torch renamed the tensor forms (and warns on the old names)
        self._all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._reduce_scatter = (getattr(dist, "reduce_scatter_single", None)
                                or dist.reduce_scatter_tensor)
        types = set(_TORCH_TYPES) - {"f8e4m3", "f8e5m2"}   # no reductions on float8 in torch
        self.datatypes = frozenset(t for t in types if hasattr(torch, _TORCH_TYPES[t]))

    def version(self) -> str:
        extra = f", NCCL {'.'.join(map(str, self.torch.cuda.nccl.version()))}" \
            if self.device == "cuda" else ""
        return f"torch {self.torch.__version__} {self.name}{extra}"

    def device_name(self) -> str:
        if self.device == "cuda":
            return f"cuda:{self.torch.cuda.current_device()} " \
                   f"{self.torch.cuda.get_device_name()}"
        return "cpu"

    def unsupported(self, coll: Collective, dtype: DataType, op: str | None) -> str | None:
        if coll.name == "sendrecv" and self.size == 1:   # gloo has no pair to itself
            return f"sendrecv on backend {self.name} needs at least 2 ranks"
        return super().unsupported(coll, dtype, op)

    def supports_in_place(self, coll: Collective, in_place: bool) -> bool:
        # a p2p send and receive on one buffer would race
        return not (in_place and coll.name == "sendrecv")

    def empty(self, n: int, dtype: DataType) -> Any:
        return self.torch.empty(n, dtype=getattr(self.torch, _TORCH_TYPES[dtype.name]),
                                device=self.device)

    def to_host(self, buf: Any) -> np.ndarray:
        if buf.dtype == self.torch.bfloat16:   # numpy has no bfloat16: compare float32 copies
            buf = buf.float()
        return buf.detach().cpu().numpy()      # a view for CPU tensors, a copy from the GPU

    def write(self, buf: Any, values: np.ndarray) -> None:
        buf.copy_(self.torch.from_numpy(np.ascontiguousarray(values)))

    def zero(self, buf: Any) -> None:
        buf.zero_()

    def run(self, coll: Collective, send: Any, recv: Any, op: str, root: int,
            in_place: bool) -> Any:
        dist, rank, name = self.dist, self.rank, coll.name
        torch_op = self._ops.get(op)
        if name in ("all_reduce", "reduce"):
            if not in_place:
                recv.copy_(send)
            if name == "all_reduce":
                dist.all_reduce(recv, torch_op)
                return recv
            dist.reduce(recv, root, torch_op)
            return recv if rank == root else None
        if name == "all_gather":
            self._all_gather(recv, send)
            return recv
        if name == "reduce_scatter":
            self._reduce_scatter(recv, send, torch_op)
            return recv
        if name == "all_to_all":
            if in_place:   # torch's all_to_all_single may read after writing: give it a copy
                dist.all_to_all_single(recv, send.clone())
            else:
                dist.all_to_all_single(recv, send)
            return recv
        if name == "broadcast":
            buf = send if (rank == root and not in_place) else recv
            dist.broadcast(buf, root)
            return buf
        if name == "gather":
            chunks = list(recv.chunk(self.size)) if rank == root else None
            dist.gather(send, chunks, root)
            return recv if rank == root else None
        if name == "scatter":
            chunks = list(send.chunk(self.size)) if rank == root else None
            dist.scatter(recv, chunks, root)
            return recv
        if name == "sendrecv":
            P2P = dist.P2POp
            reqs = dist.batch_isend_irecv([P2P(dist.isend, send, (rank + 1) % self.size),
                                           P2P(dist.irecv, recv, (rank - 1) % self.size)])
            for req in reqs:
                req.wait()
            return recv
        raise ValueError(f"backend {self.name}: no collective {name}")

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def barrier(self) -> None:
        self.dist.barrier()

    def allreduce_number(self, value: float, op: str) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, self._ops[op])
        return float(t.item())

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.size
        self.dist.all_gather_object(out, obj)
        return out

    def _remove_store_file(self) -> None:
        if self.rank == 0 and self.init_method.startswith("file://"):
            try:
                os.unlink(self.init_method[len("file://"):])
            except OSError:
                pass   # FileStore may already have removed it

    def abort(self, code: int) -> None:
        self._remove_store_file()
        os._exit(code)

    def finalize(self) -> None:
        self.dist.destroy_process_group()
        self._remove_store_file()
        sys.stdout.flush()
