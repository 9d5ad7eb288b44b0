"""-J results.json: every row of every backend, the options and the environment.

The layout is described by perf/results.schema.json (JSON Schema draft 2020-12); bump
SCHEMA_VERSION when a field changes meaning or disappears.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import sys
from dataclasses import asdict
from typing import Any

import numpy as np

from forestcc_perf import __version__
from forestcc_perf.table import Measurement, Row, average_busbw, total_wrong

SCHEMA_VERSION = 1


def detect_launcher() -> str:
    env = os.environ
    if "FORESTCC_RANK" in env:
        return "forestcc-run"
    if "OMPI_COMM_WORLD_RANK" in env:
        return "mpirun (Open MPI)"
    if "PMI_RANK" in env:
        return "mpiexec (MPICH)"
    if "SLURM_PROCID" in env:
        return "srun"
    if "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and "WORLD_SIZE" in env):
        return "torchrun"
    return "none"


def rank_info(device: str) -> dict[str, Any]:
    """This rank's line of the preamble (gathered from every rank)."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "device": device}


def _forestcc_version() -> str | None:
    try:
        import forestcc
        return forestcc.__version__
    except ImportError:
        return None


def environment(ranks: list[dict[str, Any]], backend_versions: dict[str, str]) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "forestcc": _forestcc_version(),
        "launcher": detect_launcher(),
        "nranks": len(ranks),
        "ranks": [{"rank": r, **info} for r, info in enumerate(ranks)],
        "backends": backend_versions,
    }


def _measurement(m: Measurement | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {"time_us": m.time_us, "algbw_gbps": m.algbw, "busbw_gbps": m.busbw, "wrong": m.wrong}


def _row(row: Row) -> dict[str, Any]:
    d = asdict(row)
    d["type"] = d.pop("dtype")
    d["out_of_place"] = _measurement(row.out_of_place)
    d["in_place"] = _measurement(row.in_place)
    return d


def build(collective: str, binary: str, options: dict[str, Any], env: dict[str, Any],
          rows_by_backend: dict[str, list[Row]]) -> dict[str, Any]:
    all_rows = [r for rows in rows_by_backend.values() for r in rows]
    wrong = total_wrong(all_rows)
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "forestcc-perf", "version": __version__},
        "collective": collective,
        "binary": binary,
        "options": options,
        "environment": env,
        "rows": [_row(r) for r in all_rows],
        "summary": {
            "avg_busbw_gbps": {name: average_busbw(rows)
                               for name, rows in rows_by_backend.items()},
            "wrong": wrong,
            "ok": wrong == 0,
        },
    }


def write(path: str, results: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
