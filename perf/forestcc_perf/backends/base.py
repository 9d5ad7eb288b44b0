"""What forestcc-perf needs from a communication library, and the launcher environment.

A backend owns its buffers (numpy arrays, torch tensors, ...), runs one collective on given
send/receive views and returns the view that holds the result, and offers the few helpers the
benchmark itself needs: a barrier, an allreduce of one number (timing aggregation and #wrong
sums go through the measured library itself, outside the timed loop), and an all-gather of
small Python objects (the preamble's rank lines).
"""
from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from forestcc_perf.collectives import Collective, DataType


class BackendUnavailable(Exception):
    """The backend cannot run here (not installed, no GPU, wrong launcher): a one-line reason
    for the user, exit code 2, no traceback."""


class Backend:
    name = "?"
    device = "cpu"
    rank = 0
    size = 1
    ops: frozenset[str] = frozenset()
    datatypes: frozenset[str] = frozenset()

    # -- description -----------------------------------------------------------------------------
    def version(self) -> str:
        """Library and version, for the preamble and the JSON environment."""
        raise NotImplementedError

    def device_name(self) -> str:
        return self.device

    def unsupported(self, coll: Collective, dtype: DataType, op: str | None) -> str | None:
        """Why this backend cannot run (coll, dtype, op), or None when it can."""
        if dtype.name not in self.datatypes:
            return f"datatype {dtype.name} is not supported by backend {self.name}"
        if coll.reduces and op not in self.ops:
            return f"op {op} is not supported by backend {self.name}"
        return None

    def supports_in_place(self, coll: Collective, in_place: bool) -> bool:
        return True

    # -- buffers ---------------------------------------------------------------------------------
    def empty(self, n: int, dtype: DataType) -> Any:
        return np.empty(n, dtype.host)

    def to_host(self, buf: Any) -> np.ndarray:
        """The buffer's values as a numpy array (a view where the memory is the host's)."""
        return buf

    def write(self, buf: Any, values: np.ndarray) -> None:
        buf[...] = values

    def zero(self, buf: Any) -> None:
        buf[...] = 0

    # -- communication ---------------------------------------------------------------------------
    def run(self, coll: Collective, send: Any, recv: Any, op: str, root: int,
            in_place: bool) -> Any:
        """Run one collective; return the view holding this rank's result (None where nothing
        is defined, as on the non-root ranks of reduce and gather)."""
        raise NotImplementedError

    def sync(self) -> None:
        """Wait for outstanding device work (no-op on the host: the calls are blocking)."""

    def barrier(self) -> None:
        raise NotImplementedError

    def allreduce_number(self, value: float, op: str) -> float:
        """op over ranks of one float64 (op: sum, min or max)."""
        raise NotImplementedError

    def all_gather_object(self, obj: Any) -> list[Any]:
        raise NotImplementedError

    def abort(self, code: int) -> None:
        """End this rank after a failure so the others do not wait forever."""
        os._exit(code)

    def finalize(self) -> None:
        """Leave cleanly after a successful run."""


# -- the launcher's environment, read before any library is initialised -------------------------
_RANK_VARS = ("FORESTCC_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID",
              "RANK")
_SIZE_VARS = ("FORESTCC_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE")


def _first_int(names: tuple[str, ...], default: int) -> int:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return default


def launcher_rank() -> int:
    """This process's rank as the launcher set it (0 when started alone)."""
    return _first_int(_RANK_VARS, 0)


def launcher_size() -> int:
    return _first_int(_SIZE_VARS, 1)


def under_mpi_launcher() -> bool:
    return any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


def job_key() -> str | None:
    """A name every rank of this launch shares and no other launch has, or None."""
    for name in ("FORESTCC_JOB_ID", "PMIX_NAMESPACE", "TORCHELASTIC_RUN_ID"):
        if os.environ.get(name):
            return re.sub(r"[^A-Za-z0-9_.-]", "_", os.environ[name])
    if os.environ.get("SLURM_JOB_ID"):
        return f"slurm-{os.environ['SLURM_JOB_ID']}-{os.environ.get('SLURM_STEP_ID', '0')}"
    return None
