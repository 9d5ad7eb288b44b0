"""The libraries forestcc-perf can measure, created by name.

forestcc (default), mpi (mpi4py), gloo (torch.distributed on CPU) and nccl (torch.distributed
on CUDA). A backend that cannot run here raises BackendUnavailable with a one-line reason that
names the install command; the CLI prints it and exits 2.
"""
from __future__ import annotations

from forestcc_perf.backends.base import Backend, BackendUnavailable

BACKENDS = ("forestcc", "mpi", "gloo", "nccl")

__all__ = ["BACKENDS", "Backend", "BackendUnavailable", "create"]


def create(name: str, algo: str | None = None, timeout_s: float = 300.0,
           memory: str = "numpy") -> Backend:
    """Initialise backend ``name`` in this process (joins the job: collective over ranks).
    ``algo`` and ``memory`` (numpy or forestcc buffers) apply to the forestcc backend."""
    if name == "forestcc":
        from forestcc_perf.backends.forestcc_backend import ForestccBackend
        return ForestccBackend(algo, memory)
    if name == "mpi":
        from forestcc_perf.backends.mpi import MpiBackend
        return MpiBackend()
    if name in ("gloo", "nccl"):
        from forestcc_perf.backends.gloo import TorchBackend
        return TorchBackend(name, timeout_s)
    raise BackendUnavailable(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")


def creation_order(names: list[str]) -> list[str]:
    """mpi first: forestcc.init() broadcasts its id through mpi4py when it is already imported,
    and torch's rendezvous can fall back on it too."""
    return sorted(names, key=lambda n: 0 if n == "mpi" else 1)
