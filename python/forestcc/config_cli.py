"""``forestcc-config``: where forestcc's installed native pieces are, for build and launch lines.

    LD_PRELOAD=$(forestcc-config --nccl-shim) ./my_nccl_program     run an NCCL program on forestcc
    cc prog.c -I$(forestcc-config --nccl-include) ...               build against forestcc's nccl.h
    $(forestcc-config --nccl-perf)/all_reduce_perf -b 8 -e 1M       nccl-tests-style benchmarks

Each option prints one absolute path and exits 0; a missing file is an error (exit 1) that says
to reinstall, so a broken installation never yields a path that does not exist.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

__all__ = ["main", "nccl_shim_path"]


def _native_dir() -> Path:
    # Where the build installed the compiled pieces: beside the _C extension. In a normal install
    # that is this package's folder; in an editable one the Python files stay in the source tree
    # while the extension, the shim and the benchmarks are in site-packages.
    spec = importlib.util.find_spec("forestcc._C")
    return Path(spec.origin).resolve().parent if spec and spec.origin else Path(__file__).resolve().parent


_PACKAGE = _native_dir()


def nccl_shim_path() -> Path:
    """The NCCL-compatible shim, ``libnccl.so.2`` (SONAME ``libnccl.so.2``), inside the package."""
    return _PACKAGE / "libnccl.so.2"


_PATHS = {
    "nccl_shim": (nccl_shim_path, "the NCCL shim library (for LD_PRELOAD)"),
    "nccl_include": (lambda: _PACKAGE / "include" / "nccl", "the folder of forestcc's nccl.h"),
    "nccl_perf": (lambda: _PACKAGE / "bin" / "nccl", "the folder of the NCCL-API benchmarks"),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="forestcc-config", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    for key, (_, help_text) in _PATHS.items():
        group.add_argument("--" + key.replace("_", "-"), dest="what", action="store_const",
                           const=key, help=f"print the path of {help_text}")
    args = parser.parse_args(argv)
    path = _PATHS[args.what][0]()
    if not path.exists():
        print(f"forestcc-config: {path} is missing; reinstall forestcc (pip install .)",
              file=sys.stderr)
        sys.exit(1)
    print(path)


if __name__ == "__main__":
    main()
