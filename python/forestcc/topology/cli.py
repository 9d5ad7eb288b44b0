"""``forestcc topo ...``: look at topologies and the forests ForestColl builds on them.

    forestcc topo list                              presets
    forestcc topo show FILE [--bound]               summary (and the exact all_gather optimum)
    forestcc topo draw FILE -o x.png                picture (needs matplotlib)
    forestcc topo forest FILE [--collective C] [--k K] [--method M]
                                                    generate a forest, print bound vs achieved
    forestcc topo write-presets DIR                 regenerate schedules/topologies/*.json

FILE may also be a preset name (``dgx-a100x2``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from .files import load, save
from .model import Topology, TopologyError
from .presets import PRESETS, preset

__all__ = ["resolve", "topo_main"]


def resolve(name_or_path: str) -> Topology:
    """A topology file, or a preset by name when no such file exists."""
    if not os.path.exists(name_or_path) and name_or_path in PRESETS:
        return preset(name_or_path)
    return load(name_or_path)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="forestcc topo", description="Topology files and presets.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the presets")
    show = sub.add_parser("show", help="summarize a topology")
    show.add_argument("topology", help="topology file or preset name")
    show.add_argument("--bound", action="store_true", help="also compute the exact all_gather optimum")
    draw = sub.add_parser("draw", help="draw a topology to an image file")
    draw.add_argument("topology")
    draw.add_argument("-o", "--output", required=True, help="image file, e.g. x.png")
    forest = sub.add_parser("forest", help="generate a ForestColl forest and print its evidence")
    forest.add_argument("topology")
    forest.add_argument("--collective", default="all_gather",
                        choices=["all_gather", "reduce_scatter", "all_reduce"])
    forest.add_argument("--k", type=int, default=None, help="trees per root (default: optimal k)")
    forest.add_argument("--method", default="auto", choices=["auto", "generic", "box-rotation"],
                        help="auto (default): the box construction where it applies and meets the "
                             "bound, else generic; box-rotation: only the box construction (the "
                             "rotation, with extra entries into boxes whose fabric binds); "
                             "generic: the general path (see docs/forest-generation.md)")
    write = sub.add_parser("write-presets", help="write every preset as DIR/NAME.json")
    write.add_argument("directory")
    return p


def topo_main(argv: list[str] | None = None) -> int:
    """Entry point of ``forestcc topo``; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            for name, make in PRESETS.items():
                print(f"{name:20} {make().description}")
        elif args.command == "show":
            from .show import summary
            topo = resolve(args.topology)
            bound = None
            if args.bound:
                from ..algorithms.forest import throughput_bound
                bound = throughput_bound(topo)
            print(summary(topo, bound))
        elif args.command == "draw":
            from .draw import draw
            draw(resolve(args.topology), args.output)
            print(f"wrote {args.output}")
        elif args.command == "forest":
            from ..algorithms.forest import generate_forest
            topo = resolve(args.topology)
            started = time.perf_counter()
            forest = generate_forest(topo, args.collective, args.k, args.method)
            print(forest.report())
            print(f"generated in {time.perf_counter() - started:.3f} s")
        elif args.command == "write-presets":
            os.makedirs(args.directory, exist_ok=True)
            for name in PRESETS:
                path = os.path.join(args.directory, name + ".json")
                save(preset(name), path)
                print(f"wrote {path}")
    except (TopologyError, OSError) as err:
        print(f"forestcc topo: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(topo_main())
