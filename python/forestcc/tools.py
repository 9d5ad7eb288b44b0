"""Console entry points that run native programs shipped inside the package."""
from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["channel_bench", "reduce_bench"]


def _native_program(name: str) -> str:
    # Next to the native module: the same place in a normal and in an editable install.
    from forestcc import _C
    path = Path(_C.__file__).resolve().parent / "bin" / name
    if not path.exists():
        sys.exit(f"forestcc: {path} is missing; reinstall forestcc (pip install .)")
    return str(path)


def channel_bench() -> None:
    """forestcc-channel-bench: run under ``forestcc-run -n 2``; see ``--help``."""
    program = _native_program("forestcc-channel-bench")
    os.execv(program, [program, *sys.argv[1:]])


def reduce_bench() -> None:
    """forestcc-reduce-bench: one process, the CPU reductions at each instruction-set level; see ``--help``."""
    program = _native_program("forestcc-reduce-bench")
    os.execv(program, [program, *sys.argv[1:]])
