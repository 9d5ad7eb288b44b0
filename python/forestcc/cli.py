"""The ``forestcc`` command: configuration, environment facts, plans and topologies.

    forestcc config            every configuration knob with its type, default and current value
    forestcc info              version, launch environment, CUDA support
    forestcc plan ...          plan tools (verify; see ``forestcc plan --help``)
    forestcc topo ...          topology tools (list, show, draw, forest; see ``forestcc topo --help``)
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

__all__ = ["main"]


def _config(_args: argparse.Namespace) -> int:
    from forestcc.errors import config_table
    for name, typ, default, doc in config_table():
        current = os.environ.get(name)
        shown = f"{current!r} (set)" if current is not None else f"{default!r} (default)"
        print(f"{name}  [{typ}] = {shown}\n    {doc}")
    return 0


def _info(_args: argparse.Namespace) -> int:
    import forestcc
    from forestcc import _C
    info = _C.detect_launch()
    print(f"forestcc {forestcc.__version__}")
    print(f"launcher: {info.source} (rank {info.rank} of {info.size}, local rank {info.local_rank})")
    print(f"CUDA sources built: {_C.built_with_cuda()}; visible GPUs: {_C.cuda_device_count()}")
    return 0


# Subcommands owned by other packages of forestcc: they parse their own arguments (--help
# included), so the rest of the command line goes to them untouched.
_DELEGATED = {
    "plan": ("forestcc.plan.cli", "plan_main", "plan"),
    "topo": ("forestcc.topology.cli", "topo_main", "topology"),
}


def _run_delegated(name: str, rest: list[str]) -> int:
    module, func, what = _DELEGATED[name]
    try:
        target = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        print(f"forestcc: the {what} tools are not available in this installation ({exc})",
              file=sys.stderr)
        return 2
    return int(target(rest) or 0)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in _DELEGATED:
        sys.exit(_run_delegated(argv[0], argv[1:]))
    parser = argparse.ArgumentParser(prog="forestcc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("config", help="list configuration knobs").set_defaults(run=_config)
    sub.add_parser("info", help="version, launcher and CUDA facts").set_defaults(run=_info)
    for name, (_, _, what) in _DELEGATED.items():
        sub.add_parser(name, help=f"{what} tools (see forestcc {name} --help)")
    args = parser.parse_args(argv)
    sys.exit(args.run(args))


if __name__ == "__main__":
    main()
