#!/usr/bin/env python3
"""Forest plans at cluster scale: compile, write, load and verify, with time and peak memory.

For rail-optimized fat trees of DGX-A100 boxes (``topology.presets.a100_fat_tree``), each case
generates the forest (box rotation: well under a second at these sizes), compiles it into a plan
(``compile_forest``: trees -> validated plan dict; ``--engine python`` times the Python reference
compiler instead of the C++ one), writes the file, then, in a fresh process,
loads it (the C++ loader and validator) and verifies it (``forestcc.plan.verify``). Each step runs
in its own process, so peak memory is per step. Prints, per case: ranks, ops, file size, CPU
seconds of compiling, loading and verifying (the machine may be shared: CPU seconds are the
steadier number), wall seconds of verifying, and peak memory of compiling, of loading (the plan
dict and one rank entry's parse tree) and of verifying.

    python perf/forest_plan_bench.py [--only 1024:all_gather] [--all] [--json] [--keep DIR]
                                     [--engine python]

--all adds the 1,024-rank all_reduce (5 million ops: 15 CPU s and 4.8 GB to compile, 2.3 GB to
load, 3.1 GB to verify; run it alone on a shared machine).

    python perf/forest_plan_bench.py --report [--only 256:all_reduce] [--topology mi250x4:all_reduce]

--report runs ``forestcc plan report`` (forestcc.plan.report.make_report: the forest, ring, double
binary tree and hierarchical plans generated and simulated from 1 MiB to 1 GiB, with the report's
defaults for the rank count: above 256 ranks fewer sizes, the optimal forest only, and no
baseline plan over 8 million ops) per case, each in its own process, and prints its wall and CPU
seconds, peak memory, the forest's k, and each algorithm's algbw at 1 GiB as a percentage of the
bound (n/a: the algorithm does not apply or was not built). Cases are ranks of the fat tree
(``--only``, default REPORT_CASES) or presets (``--topology NAME:COLLECTIVE``).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

# (ranks, collective)
CASES = [(128, "all_reduce"), (256, "all_gather"), (256, "all_reduce"), (512, "all_reduce"),
         (1024, "all_gather")]
LARGE = [(1024, "all_reduce")]
REPORT_CASES = [(256, "all_gather"), (256, "all_reduce"), (1024, "all_gather"),
                (1024, "all_reduce")]


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def compile_case(ranks: int, collective: str, path: str, engine: str = "native") -> dict:
    from forestcc.algorithms import generate_forest
    from forestcc.algorithms.forest_plan import compile_forest
    from forestcc.plan import format as plan_format
    from forestcc.topology.presets import a100_fat_tree
    boxes = ranks // 8
    topo = a100_fat_tree(boxes, min(16, boxes))
    cpu = time.process_time()
    forest = generate_forest(topo, collective)
    generated = time.process_time()
    plan = compile_forest(forest, engine=engine)
    compiled = time.process_time()
    plan_format.save(plan, path, validate_first=False)  # compile_forest validated it
    return {"ops": sum(len(w["ops"]) for e in plan["ranks"] for w in e["workers"]),
            "method": forest.method, "generate_cpu_s": generated - cpu,
            "compile_cpu_s": compiled - generated, "write_cpu_s": time.process_time() - compiled,
            "file_bytes": os.path.getsize(path), "compile_peak_bytes": _peak_bytes()}


def verify_case(path: str) -> dict:
    from forestcc.plan import format as plan_format
    from forestcc.plan.verifier import verify
    cpu = time.process_time()
    plan = plan_format.load(path)
    loaded, wall = time.process_time(), time.perf_counter()
    load_peak = _peak_bytes()  # the plan dict, with one rank entry's parse tree at a time
    result = verify(plan, validated=True)
    return {"load_cpu_s": loaded - cpu, "load_peak_bytes": load_peak,
            "verify_cpu_s": time.process_time() - loaded,
            "verify_wall_s": time.perf_counter() - wall, "verified": result.ok,
            "verify_peak_bytes": _peak_bytes()}


def _topology(spec: str):
    """A fat tree of DGX-A100 boxes for a rank count, else the preset of that name."""
    from forestcc import topology
    from forestcc.topology.presets import a100_fat_tree
    if spec.isdigit():
        boxes = int(spec) // 8
        return a100_fat_tree(boxes, min(16, boxes))
    return topology.preset(spec)


def report_case(spec: str, collective: str) -> dict:
    from forestcc.plan.report import ALGORITHMS, make_report
    topo = _topology(spec)
    cpu, wall = time.process_time(), time.perf_counter()
    report = make_report(topo, collective)
    bound = float(report.bound_algbw)
    row = {"topology": topo.name, "ranks": topo.num_ranks, "wall_s": time.perf_counter() - wall,
           "cpu_s": time.process_time() - cpu, "peak_bytes": _peak_bytes(),
           "forest_k": report.forest_k, "bound_algbw": bound}
    for name in ALGORITHMS:
        rows = report.results.get(name)
        row[name] = rows[-1].algbw / bound * 100 if rows else None
    return row


def _child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                         text=True, env=os.environ, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="RANKS:COLLECTIVE",
                        help="run only this case (repeatable), e.g. 1024:all_gather")
    parser.add_argument("--all", action="store_true",
                        help="also the 1,024-rank all_reduce (4-6 GB per step)")
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    parser.add_argument("--keep", metavar="DIR", help="write the plan files here (default: a "
                                                      "temporary directory, removed after)")
    parser.add_argument("--report", action="store_true",
                        help="time `forestcc plan report` per case instead (see above)")
    parser.add_argument("--topology", action="append", metavar="PRESET:COLLECTIVE",
                        help="with --report: a preset case (repeatable), e.g. mi250x4:all_reduce")
    parser.add_argument("--engine", choices=("native", "python"), default="native",
                        help="the tree compiler's op emission: C++ (default) or the Python "
                             "reference (tree_plan.py); the plans are the same")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        step, *rest = args.child
        row = (compile_case(int(rest[0]), rest[1], rest[2], *rest[3:]) if step == "compile"
               else report_case(rest[0], rest[1]) if step == "report"
               else verify_case(rest[0]))
        print(json.dumps(row))
        return 0
    if args.report:
        return _reports(args)
    cases = CASES + (LARGE if args.all else [])
    if args.only:
        cases = [(int(r), c) for r, c in (item.split(":") for item in args.only)]
    if not args.json:
        print(f"{'ranks':>6} {'collective':>14} {'ops':>10} {'file MB':>8} {'compile cpu s':>14} "
              f"{'load cpu s':>11} {'verify cpu s':>13} {'verify wall s':>14} "
              f"{'compile GB':>11} {'load GB':>8} {'verify GB':>10}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or scratch
        os.makedirs(directory, exist_ok=True)
        for ranks, collective in cases:
            path = os.path.join(directory, f"forest_{collective}_{ranks}.json")
            row = {"ranks": ranks, "collective": collective,
                   **_child("compile", str(ranks), collective, path, args.engine),
                   **_child("verify", path)}
            print(json.dumps(row) if args.json else
                  f"{ranks:>6} {collective:>14} {row['ops']:>10} {row['file_bytes'] / 1e6:>8.0f} "
                  f"{row['compile_cpu_s']:>14.1f} {row['load_cpu_s']:>11.1f} "
                  f"{row['verify_cpu_s']:>13.1f} {row['verify_wall_s']:>14.1f} "
                  f"{row['compile_peak_bytes'] / 1e9:>11.2f} {row['load_peak_bytes'] / 1e9:>8.2f} "
                  f"{row['verify_peak_bytes'] / 1e9:>10.2f}"
                  + ("" if row["verified"] else "  NOT VERIFIED"), flush=True)
    return 0


def _reports(args) -> int:
    cases = [(str(r), c) for r, c in REPORT_CASES]
    if args.only or args.topology:
        cases = [tuple(item.split(":")) for item in (args.only or []) + (args.topology or [])]
    if not args.json:
        print(f"{'topology':>20} {'collective':>14} {'wall s':>7} {'cpu s':>7} {'peak GB':>8} "
              f"{'k':>3} {'bound GB/s':>10}   % of bound at 1 GiB: forest ring tree hierarchical",
              flush=True)
    for spec, collective in cases:
        row = {"collective": collective, **_child("report", spec, collective)}
        cells = " ".join(f"{row[name]:6.1f}" if row[name] is not None else f"{'n/a':>6}"
                         for name in ("forest", "ring", "tree", "hierarchical"))
        print(json.dumps(row) if args.json else
              f"{row['topology']:>20} {collective:>14} {row['wall_s']:>7.1f} {row['cpu_s']:>7.1f} "
              f"{row['peak_bytes'] / 1e9:>8.2f} {row['forest_k']:>3} {row['bound_algbw']:>10.2f}"
              f"   {cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
