"""Command-line subcommands for plans: `forestcc plan verify FILE...`, and for the built-in
generators `plan verify --algo NAME --nranks N`, `plan dump` and `plan algorithms`
(builtin_cli.py); for topologies `plan generate forest`, `plan simulate` and `plan report`
(forest_cli.py).

`forestcc plan ...` calls plan_main with the arguments after "plan"; a parser of one's own can
take the verify subcommand with add_verify_arguments + verify_main; `python -m forestcc.plan`
runs main.
Exit status of verify: 0 when every plan is correct, 1 when one has issues, 2 when a file
cannot be read or is not a valid plan. A file that verifies is recorded as proven
(forestcc.plan.proof), so running it skips the proof.
"""
from __future__ import annotations

import argparse
import json
import sys

from . import builtin_cli, forest_cli, proof
from . import format as plan_format
from .verifier import verify

EXIT_OK, EXIT_ISSUES, EXIT_INVALID = 0, 1, 2


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the arguments of `plan verify` to a (sub)parser."""
    parser.add_argument("files", nargs="*", metavar="FILE", help="plan JSON files to verify")
    builtin_cli.add_request_arguments(parser, collective_required=False)
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing for plans that verify")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per file instead of a text report")


def verify_main(args: argparse.Namespace) -> int:
    """Runs `plan verify` on parsed arguments; returns the exit status."""
    status = EXIT_OK
    for path in args.files:
        try:
            data = plan_format.read_bytes(path)
            plan = plan_format.loads(data, path)
        except plan_format.PlanError as error:
            status = max(status, EXIT_INVALID)
            if args.json:
                print(json.dumps({"file": path, "valid": False, "errors": error.errors}))
            else:
                print(error, file=sys.stderr)
            continue
        result = verify(plan, name=path, validated=True)  # loads validated it
        if not result.ok:
            status = max(status, EXIT_ISSUES)
        else:  # running this exact content skips the proof from now on, however large
            proof.record_proof(data)
        _report_verified(args, path, result)
    if getattr(args, "algo", None) is not None:  # generated plans (builtin_cli)
        status = max(status, builtin_cli.verify_generated(
            args, lambda label, result: _report_verified(args, label, result)))
    elif not args.files:
        print("forestcc plan verify: give plan files, or --algo NAME --nranks N", file=sys.stderr)
        status = EXIT_INVALID
    return status


def _report_verified(args: argparse.Namespace, label: str, result) -> None:
    """Prints one verify result as text or (--json) one JSON object."""
    if args.json:
        print(json.dumps({
            "file": label, "valid": True, "ok": result.ok,
            "ops_executed": result.ops_executed,
            "issues": [{"kind": i.kind, "rank": i.rank, "worker": i.worker, "step": i.step,
                        "message": i.message} for i in result.issues]}))
    elif not (args.quiet and result.ok):
        print(result)


def build_parser(prog: str = "python -m forestcc.plan") -> argparse.ArgumentParser:
    """The parser of the plan tools: `<prog> verify FILE...`."""
    parser = argparse.ArgumentParser(prog=prog, description="Work with forestcc plan files.")
    commands = parser.add_subparsers(dest="command", required=True)
    verify_parser = commands.add_parser("verify", help="check plans for deadlocks, races and "
                                                       "wrong results; records the proof of each "
                                                       "file that passes, which a plan too large "
                                                       "to prove when algo= loads it needs to run")
    add_verify_arguments(verify_parser)
    verify_parser.set_defaults(func=verify_main)
    dump_parser = commands.add_parser("dump", help="write a built-in algorithm's plan as JSON")
    builtin_cli.add_dump_arguments(dump_parser)
    dump_parser.set_defaults(func=builtin_cli.dump_main)
    algorithms_parser = commands.add_parser("algorithms", help="list the built-in algorithms "
                                                               "and their collectives")
    builtin_cli.add_algorithms_arguments(algorithms_parser)
    algorithms_parser.set_defaults(func=builtin_cli.algorithms_main)
    forest_cli.add_commands(commands)  # generate forest, simulate, report
    return parser


def plan_main(argv=None, prog: str = "forestcc plan") -> int:
    """`forestcc plan ...`: the `forestcc` CLI hands over the arguments after `plan`."""
    args = build_parser(prog).parse_args(argv)
    return args.func(args)


def main(argv=None) -> int:
    """`python -m forestcc.plan ...`."""
    return plan_main(argv, prog="python -m forestcc.plan")
