"""Plan subcommands that need a topology: ``generate forest``, ``simulate`` and ``report``.

    forestcc plan generate forest --topology FILE --collective C [--k K] -o plan.json
    forestcc plan simulate PLAN --topology FILE [--size 1G ...]
    forestcc plan report --topology FILE [--collective all_reduce] [-o report.png]

FILE is a topology file or a preset name (``dgx-a100x2``). Sizes take K/M/G suffixes (binary, as
nccl-tests). cli.py adds these with add_commands; each ``*_main`` returns the exit status: 0, 1
(a generated plan failed verification), 2 (bad input: unreadable file, unknown topology, a plan
that does not fit the topology).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from . import format as plan_format
from .report import LARGE_RANKS, MORE_SLICES, WIDE_K_MAX, WIDE_K_RANKS

__all__ = ["add_commands", "generate_forest_main", "parse_size", "report_main", "simulate_main"]

EXIT_OK, EXIT_ISSUES, EXIT_INVALID = 0, 1, 2
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """'1G' -> 1073741824; K, M, G, T are binary; a plain number is bytes."""
    value = str(text).strip().upper().removesuffix("B")
    suffix = value[-1:] if value[-1:] in _SUFFIX and value[-1:] else ""
    number = value[:-1] if suffix else value
    try:
        size = int(float(number) * _SUFFIX[suffix])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1048576, 64K, 1M, 1G)")
    if size < 0:
        raise argparse.ArgumentTypeError(f"a size must be >= 0, got {text!r}")
    return size


def _sizes(values) -> list[int]:
    out: list[int] = []
    for value in values:
        out += [parse_size(v) for v in str(value).split(",") if v.strip()]
    return out


def _topology(name_or_path: str):
    from ..topology.cli import resolve
    return resolve(name_or_path)


def _fail(command: str, err) -> int:
    print(f"forestcc plan {command}: {err}", file=sys.stderr)
    return EXIT_INVALID


# ---- generate forest ----------------------------------------------------------------------------
def add_generate_forest_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `plan generate forest` to a (sub)parser."""
    from ..algorithms.tree_plan import MODES
    parser.add_argument("--topology", required=True, metavar="FILE",
                        help="topology file or preset name")
    parser.add_argument("--collective", default="all_gather",
                        choices=["all_gather", "reduce_scatter", "all_reduce"])
    parser.add_argument("--k", type=int, default=None,
                        help="trees per root (default: the smallest k that is optimal)")
    parser.add_argument("--method", default="auto", choices=["auto", "generic", "box-rotation"],
                        help="forest construction (see forestcc topo forest)")
    parser.add_argument("--mode", default="pipelined", choices=MODES,
                        help="workers: pipelined (per tree level; GPUs, big messages) or "
                             "compact (two per rank; CPUs, small messages)")
    parser.add_argument("--in-place", action="store_true", help="an in-place plan")
    parser.add_argument("--max-slices", type=int, default=None,
                        help="pipeline slices at most (default 64; compact: 1)")
    parser.add_argument("--min-slice-bytes", type=parse_size, default=None,
                        help="smallest slice of a chunk (default 32K)")
    parser.add_argument("--no-lanes", action="store_true",
                        help="one channel per worker pair (default: worker pairs on a direct "
                             "link spread over its spare channels, up to a chunk per lane)")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip verifying the plan before writing it")
    parser.add_argument("-o", "--output", required=True, metavar="PLAN",
                        help="plan file to write")


def generate_forest_main(args: argparse.Namespace) -> int:
    """Generates, prints the evidence, verifies (unless --no-verify) and writes the plan."""
    from ..algorithms.forest import generate_forest
    from ..algorithms.forest_plan import compile_forest
    from ..topology.model import TopologyError
    from .verifier import verify
    try:
        topo = _topology(args.topology)
        started = time.perf_counter()
        forest = generate_forest(topo, args.collective, args.k, args.method)
        plan = compile_forest(forest, mode=args.mode, in_place=args.in_place,
                              max_slices=args.max_slices, min_slice_bytes=args.min_slice_bytes,
                              lanes=not args.no_lanes)
        seconds = time.perf_counter() - started
    except (TopologyError, OSError, ValueError) as err:
        return _fail("generate forest", err)
    print(forest.report())
    workers = sum(len(entry["workers"]) for entry in plan["ranks"])
    op_count = sum(len(w["ops"]) for entry in plan["ranks"] for w in entry["workers"])
    print(f"plan       {plan['name']}: {plan['nranks']} ranks, {workers} workers, {op_count} ops, "
          f"chunks_per_block {plan['chunks_per_block']}, up to "
          f"{plan['pipeline']['max_slices']} slices (generated in {seconds:.2f} s)")
    status = EXIT_OK
    if not args.no_verify:
        # compile_forest validated the plan: verify and save need not again (each validation
        # of a 1,024-rank plan costs seconds)
        result = verify(plan, name=args.output, validated=True)
        print(f"verified   {'OK' if result.ok else 'FAILED'}: {result}"
              if not result.ok else f"verified   OK ({result.ops_executed} ops executed)")
        if not result.ok:
            status = EXIT_ISSUES
    try:
        plan_format.save(plan, args.output, validate_first=False)
        if not args.no_verify and status == EXIT_OK:
            # a proof of exactly what was written: running the file skips proving it again,
            # however large (forestcc.plan.proof)
            from . import proof
            proof.record_proof(plan_format.read_bytes(args.output))
    except (OSError, plan_format.PlanError) as err:
        return _fail("generate forest", err)
    print(f"wrote      {args.output}")
    return status


# ---- simulate -----------------------------------------------------------------------------------
def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `plan simulate` to a (sub)parser."""
    parser.add_argument("plan", metavar="PLAN", help="plan file")
    parser.add_argument("--topology", required=True, metavar="FILE",
                        help="topology file or preset name (rank i = its i-th compute node)")
    parser.add_argument("--size", action="append", default=None, metavar="BYTES",
                        help="message size(s), nccl-tests style (the whole buffer), e.g. 1G or "
                             "1M,64M; may repeat (default 1G)")
    parser.add_argument("--dtype-size", type=int, default=4, help="bytes per element (4)")
    parser.add_argument("--mem-bw", type=float, default=None, metavar="GBPS",
                        help="local copy/reduce bandwidth per worker (default: free)")
    parser.add_argument("--json", action="store_true", help="one JSON object per size")


def simulate_main(args: argparse.Namespace) -> int:
    """Prints size, slices, time, algbw and busbw per size (or JSON lines)."""
    from ..topology.model import TopologyError
    from .simulator import SimulationError, Simulator
    try:
        sizes = _sizes(args.size or ["1G"])
        plan = plan_format.load(args.plan)
        topo = _topology(args.topology)
    except (plan_format.PlanError, TopologyError, OSError, argparse.ArgumentTypeError) as err:
        return _fail("simulate", err)
    fingerprint = plan["provenance"].get("topology_fingerprint")
    if fingerprint and fingerprint != topo.fingerprint() and not args.json:
        print(f"# note: the plan was made for topology {fingerprint[:19]}..., not "
              f"{topo.name} ({topo.fingerprint()[:19]}...)")
    if not args.json:
        print(f"# {plan['name']}: {plan['collective']} on {topo.name} ({topo.num_ranks} ranks), "
              f"simulated")
        print(f"# {'size (B)':>12} {'slices':>7} {'time (us)':>12} {'algbw':>9} {'busbw':>9}")
    notes: list = []
    try:
        prepared = Simulator(plan, topo)  # validated, routed and decoded once for every size
    except SimulationError as err:
        return _fail("simulate", err)
    for size in sizes:
        try:
            result = prepared.run(size, elem_size=args.dtype_size, mem_bw=args.mem_bw)
        except SimulationError as err:
            return _fail("simulate", err)
        notes += [n for n in result.notes if n not in notes]
        if args.json:
            print(json.dumps({"plan": plan["name"], "topology": topo.name,
                              "collective": result.collective, "size": result.size,
                              "slices": result.slices, "time_us": result.time_us,
                              "algbw": result.algbw, "busbw": result.busbw,
                              "notes": result.notes}))
        else:
            print(f"  {result.size:>12} {result.slices:>7} {result.time_us:12.2f} "
                  f"{result.algbw:9.2f} {result.busbw:9.2f}")
    if not args.json:
        for note in notes:
            print(f"# note: {note}")
    return EXIT_OK


# ---- report -------------------------------------------------------------------------------------
def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `plan report` to a (sub)parser."""
    parser.add_argument("--topology", required=True, metavar="FILE",
                        help="topology file or preset name")
    parser.add_argument("--collective", default="all_reduce",
                        choices=["all_gather", "reduce_scatter", "all_reduce"])
    parser.add_argument("-b", "--min", dest="min_size", type=parse_size, default=1 << 20,
                        help="first size (1M)")
    parser.add_argument("-e", "--max", dest="max_size", type=parse_size, default=1 << 30,
                        help="last size (1G)")
    parser.add_argument("-f", "--factor", type=int, default=None,
                        help="size step factor (default: 2; 4 above "
                             f"{LARGE_RANKS} ranks, where each size of a ring costs as much as "
                             "the largest)")
    parser.add_argument("--k", type=int, default=None,
                        help="trees per root of the forest (default: 1, 2, the optimal k and, "
                             f"up to {WIDE_K_RANKS} ranks, each k up to {WIDE_K_MAX}, "
                             "whichever simulates fastest at the largest size; above "
                             f"{LARGE_RANKS} ranks the optimal k, without trying others)")
    parser.add_argument("-o", "--output", metavar="PNG", default=None,
                        help="also draw algbw against size to this image")


def report_main(args: argparse.Namespace) -> int:
    """Prints the report table and, with -o, draws it."""
    from ..topology.model import TopologyError
    from .report import default_factor, draw_report, format_report, make_report
    from .simulator import SimulationError
    if (args.factor is not None and args.factor < 2) or args.min_size <= 0 \
            or args.max_size < args.min_size:
        return _fail("report", "sizes: need 0 < --min <= --max and --factor >= 2")
    try:
        topo = _topology(args.topology)
        factor = args.factor or default_factor(topo.num_ranks)
        sizes = []
        size = args.min_size
        while size <= args.max_size:
            sizes.append(size)
            size *= factor
        report = make_report(topo, args.collective, sizes, args.k)
    except (TopologyError, OSError, ValueError, SimulationError) as err:
        return _fail("report", err)
    print(format_report(report))
    if args.output:
        try:
            draw_report(report, args.output)
        except (OSError, ImportError) as err:
            return _fail("report", err)
        print(f"# wrote {args.output}")
    return EXIT_OK


def add_commands(commands) -> None:
    """Adds generate (with its forest generator), simulate and report to the plan subparsers."""
    generate = commands.add_parser("generate", help="generate a plan from a topology")
    generators = generate.add_subparsers(dest="generator", required=True)
    forest = generators.add_parser(
        "forest", help="ForestColl spanning-tree forest: prints the achieved throughput and the "
                       "cut bound, writes the plan")
    add_generate_forest_arguments(forest)
    forest.set_defaults(func=generate_forest_main)
    simulate = commands.add_parser("simulate", help="predict a plan's time on a topology")
    add_simulate_arguments(simulate)
    simulate.set_defaults(func=simulate_main)
    report = commands.add_parser(
        "report", help="forest vs ring, tree, hierarchical and the bound, simulated over sizes",
        description="Generates the forest and the ring, double binary tree and hierarchical "
                    "plans for the topology, simulates each at every size and prints algbw per "
                    "size against the throughput bound. Up to "
                    f"{LARGE_RANKS} ranks: sizes 1M to 1G doubling, and the forest with 1, 2 "
                    f"or the optimal trees per root (up to {WIDE_K_RANKS} ranks also each k up to "
                    f"{WIDE_K_MAX}), each compiled with and without lanes where a tree arc is a "
                    f"direct link (up to {WIDE_K_RANKS} ranks the best also with up to "
                    f"{MORE_SLICES} slices), whichever simulates fastest "
                    f"at the largest size; the summary says which was chosen. Above {LARGE_RANKS} ranks it does less, so that 1,024 ranks take "
                    "minutes: sizes 1M to 1G x4 and the optimal forest only (--k and -f "
                    "override both).")
    add_report_arguments(report)
    report.set_defaults(func=report_main)
