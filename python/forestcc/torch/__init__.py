"""forestcc as a torch.distributed backend.

::

    import forestcc.torch                       # registers the backend "forestcc"
    torch.distributed.init_process_group("forestcc")

Works under torchrun, forestcc-run, mpirun and srun (see :mod:`forestcc.torch.rendezvous`), with
CPU and CUDA tensors; every ProcessGroup call DDP and FSDP2 make runs on forestcc
(:mod:`forestcc.torch.process_group`). Calls on CUDA tensors are enqueued on torch's current
stream, with NCCL's stream semantics (:mod:`forestcc.torch.cuda_work`). Sub-groups
(``new_group(backend="forestcc")``) get communicators of their own.

Importing this module without PyTorch installed succeeds and registers nothing; using
:class:`ProcessGroupForestcc` or :func:`register` then raises an ImportError saying so.
"""
from __future__ import annotations

import importlib

__all__ = ["BACKEND_NAME", "ProcessGroupForestcc", "create_process_group", "register"]

BACKEND_NAME = "forestcc"

try:
    import torch.distributed as _dist
except ImportError as _exc:  # registered on use, which then explains what is missing
    _dist = None
    _missing = _exc
else:
    _missing = None

_registered = False


def _require_torch() -> None:
    if _dist is None:
        raise ImportError(f"forestcc.torch needs PyTorch (pip install torch): {_missing}") \
            from _missing
    if not _dist.is_available():
        raise ImportError("forestcc.torch needs a PyTorch built with torch.distributed")


def create_process_group(store, rank: int, size: int, timeout):
    """The creator torch calls for ``init_process_group("forestcc")`` and ``new_group``:
    a :class:`ProcessGroupForestcc` of ``size`` ranks met through ``store``."""
    _require_torch()
    from forestcc.torch.process_group import ProcessGroupForestcc
    return ProcessGroupForestcc(store, rank, size, timeout)


def register() -> None:
    """Register the backend "forestcc" with torch.distributed (for CPU and CUDA tensors) and let
    ``env://`` find the ranks under forestcc-run, mpirun and srun. Importing this module does it
    when PyTorch is installed; calling it again does nothing."""
    global _registered
    _require_torch()
    if _registered:
        return
    from forestcc.torch.rendezvous import install_launcher_rendezvous
    # One ProcessGroup serves both devices: torch takes a Python ProcessGroup from the first
    # device's creator for the whole group (so "cpu:gloo,cuda:forestcc" is forestcc on both).
    _dist.Backend.register_backend(BACKEND_NAME, create_process_group, devices=["cpu", "cuda"])
    install_launcher_rendezvous()
    _registered = True


def __getattr__(name: str):
    if name == "ProcessGroupForestcc":
        _require_torch()
        return importlib.import_module("forestcc.torch.process_group").ProcessGroupForestcc
    raise AttributeError(f"module 'forestcc.torch' has no attribute {name!r}")


if _dist is not None and _dist.is_available():
    register()
