"""The built-in generators on the command line (wired into forestcc.plan.cli):

    forestcc plan algorithms
    forestcc plan dump --algo NAME --collective C --nranks N [--nodes LAYOUT] [--root R] [--in-place] [-o FILE]
    forestcc plan verify --algo NAME --nranks N [--nodes LAYOUT] [--collective C] [--root R] [--in-place] [FILE...]

--nodes gives the node of every rank (0,0,1,1) or NODESxRANKS (3x2: 3 nodes of 2 ranks, node by
node) for the algorithms that follow the node layout (hierarchical, 2dh); --nranks may then be
left out.

Exit status: 0 on success, 1 when a plan has issues (verify), 2 for a request that cannot be
served (unknown algorithm, unsupported collective, bad rank count or root) or a file error.
"""
from __future__ import annotations

import argparse
import json
import sys

from . import builtin, ops
from . import format as plan_format
from .verifier import verify

EXIT_OK, EXIT_ISSUES, EXIT_INVALID = 0, 1, 2


def _error(prog: str, message: str) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return EXIT_INVALID


def add_request_arguments(parser: argparse.ArgumentParser, collective_required: bool) -> None:
    """--algo, --collective, --nranks, --root, --in-place."""
    parser.add_argument("--algo", metavar="NAME",
                        help="built-in algorithm (see `forestcc plan algorithms`)")
    parser.add_argument("--collective", metavar="C", required=collective_required,
                        choices=ops.COLLECTIVES,
                        help="collective" + ("" if collective_required else
                                             " (default: every one the algorithm implements)"))
    parser.add_argument("--nranks", metavar="N", type=int, help="number of ranks")
    parser.add_argument("--nodes", metavar="LAYOUT",
                        help="node layout for hierarchical and 2dh: the node of every rank "
                             "(0,0,1,1) or NODESxRANKS (3x2: 3 nodes of 2 ranks); default one "
                             "node")
    parser.add_argument("--root", metavar="R", type=int,
                        help="root of broadcast/reduce/gather/scatter (default 0"
                             + ("" if collective_required else "; verify: 0, N/2 and N-1") + ")")
    in_place = parser.add_mutually_exclusive_group()
    in_place.add_argument("--in-place", dest="in_place", action="store_true", default=None,
                          help="in-place plan" + ("" if collective_required else
                                                  " (verify default: both kinds)"))
    if not collective_required:
        in_place.add_argument("--out-of-place", dest="in_place", action="store_false",
                              help="only out-of-place plans")


def add_dump_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `plan dump` to a (sub)parser."""
    add_request_arguments(parser, collective_required=True)
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the plan here instead of standard output")


def _layout(args: argparse.Namespace):
    """(nranks, nodes) from --nranks and --nodes: nodes is None without --nodes, and --nranks
    defaults to its length. Raises ValueError."""
    if args.nodes is None:
        return args.nranks, None
    nodes = builtin.parse_nodes(args.nodes)
    if args.nranks is not None and args.nranks != len(nodes):
        raise ValueError(f"--nodes {args.nodes!r} places {len(nodes)} ranks but --nranks is "
                         f"{args.nranks}")
    if args.algo is not None and not builtin.uses_nodes(args.algo):
        raise ValueError(f"--nodes: algorithm {args.algo!r} does not follow the node layout "
                         f"(those that do: "
                         f"{', '.join(a for a in builtin.algorithms() if builtin.uses_nodes(a))})")
    return len(nodes), nodes


def dump_main(args: argparse.Namespace) -> int:
    """`plan dump`: writes one generated plan as canonical JSON."""
    prog = "forestcc plan dump"
    try:
        nranks, nodes = _layout(args)
    except ValueError as error:
        return _error(prog, str(error))
    if args.algo is None or nranks is None:
        return _error(prog, "--algo and --nranks are required (--nodes gives --nranks too)")
    try:
        plan = builtin.generate(args.algo, args.collective, nranks, root=args.root,
                                in_place=bool(args.in_place), nodes=nodes)
    except (ValueError, TypeError) as error:
        return _error(prog, str(error))
    text = plan_format.dumps(plan)
    if args.output in (None, "-"):
        sys.stdout.write(text)
        return EXIT_OK
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as error:
        return _error(prog, f"cannot write {args.output}: {error.strerror or error}")
    return EXIT_OK


def algorithms_main(args: argparse.Namespace) -> int:
    """`plan algorithms`: each built-in algorithm with the collectives it implements."""
    table = builtin.algorithms()
    if getattr(args, "json", False):
        print(json.dumps({name: list(collectives) for name, collectives in table.items()}))
        return EXIT_OK
    width = max(map(len, table))
    for name, collectives in table.items():
        print(f"{name.ljust(width)}  {', '.join(collectives)}")
        print(f"{''.ljust(width)}  {builtin.summary(name)}")
    return EXIT_OK


def add_algorithms_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `plan algorithms` to a (sub)parser."""
    parser.add_argument("--json", action="store_true", help="print a JSON object")


def verify_generated(args: argparse.Namespace, report) -> int:
    """The --algo part of `plan verify`: generates and verifies every requested plan, handing
    each (label, plan, result) to report(); returns the exit status."""
    prog = "forestcc plan verify"
    try:
        nranks, nodes = _layout(args)
    except ValueError as error:
        return _error(prog, str(error))
    if nranks is None:
        return _error(prog, "--algo needs --nranks (or --nodes)")
    try:
        requests = builtin.requests(args.algo, nranks, args.collective, args.root,
                                    args.in_place, nodes)
    except ValueError as error:
        return _error(prog, str(error))
    status = EXIT_OK
    for request in requests:
        try:
            plan = builtin.generate(**request)
        except (ValueError, TypeError) as error:
            status = max(status, _error(prog, str(error)))
            continue
        result = verify(plan, name=plan["name"])
        if not result.ok:
            status = max(status, EXIT_ISSUES)
        report(plan["name"], result)
    return status
