#!/usr/bin/env python3
"""ForestColl generation at cluster scale, on uniform and non-uniform fat trees.

Real clusters are never perfectly uniform. Each case is a rail-optimized fat tree of DGX-A100
boxes (``topology.presets.a100_fat_tree``), uniform or with box 0 slowed down
(``topology.variants.one_box_slower``: half-speed NICs, or half its NVLink bandwidth), generated
with the method the case names. Each case runs in its own process, so peak memory is per case, and
is stopped after --timeout seconds (printed as "> T s"). Prints, per case: ranks, the method that
produced the forest, wall and CPU seconds (the machine may be shared: CPU seconds are the steadier
number), max-flows run, whether achieved == bound exactly, and peak memory.

    python perf/forest_scale_bench.py [--max-ranks 1024] [--timeout 600] [--only NAME] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

# (name, boxes, slowed part or None, method)
CASES = [
    ("fattree-128-nic/2", 16, "nic", "auto"),
    ("fattree-128-nvlink/2", 16, "nvlink", "auto"),
    ("fattree-128-generic", 16, None, "generic"),
    ("fattree-256", 32, None, "auto"),
    ("fattree-1024-nic/2", 128, "nic", "auto"),
    ("fattree-1024-generic", 128, None, "generic"),
    ("fattree-1024-nvlink/2", 128, "nvlink", "auto"),
    ("fattree-8192", 1024, None, "auto"),
]


def run_case(boxes: int, part: str | None, method: str) -> dict:
    from forestcc.algorithms import generate_forest
    from forestcc.topology.presets import a100_fat_tree
    from forestcc.topology.variants import one_box_slower
    topo = a100_fat_tree(boxes, min(16, boxes))
    if part:
        topo = one_box_slower(topo, 0, part)
    started, cpu = time.perf_counter(), time.process_time()
    forest = generate_forest(topo, method=method)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"ranks": topo.num_ranks, "method": forest.method, "k": forest.k,
            "trees": len(forest.trees), "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu, "maxflows": forest.stats.get("maxflows"),
            "optimal": forest.optimal, "bound_algbw": str(forest.bound_algbw),
            "peak_rss_bytes": usage.ru_maxrss * 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-ranks", type=int, default=1024, help="skip larger cases")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per case")
    parser.add_argument("--only", action="append", help="run only this case (repeatable)")
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        boxes, part, method = args.child
        print(json.dumps(run_case(int(boxes), None if part == "-" else part, method)))
        return 0
    if not args.json:
        print(f"{'topology':24} {'ranks':>6} {'method':>12} {'k':>3} {'trees':>6} {'maxflows':>9} "
              f"{'wall s':>9} {'cpu s':>8} {'optimal':>7} {'peak MiB':>8}", flush=True)
    for name, boxes, part, method in CASES:
        if (args.only and name not in args.only) or boxes * 8 > args.max_ranks:
            continue
        command = [sys.executable, __file__, "--child", str(boxes), part or "-", method]
        try:
            out = subprocess.run(command, capture_output=True, text=True, env=os.environ,
                                 timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            row = {"topology": name, "ranks": boxes * 8, "timed_out_after": args.timeout}
            print(json.dumps(row) if args.json else
                  f"{name:24} {boxes * 8:>6} {method:>12} {'':>3} {'':>6} {'':>9} "
                  f"{'> ' + format(args.timeout, '.0f'):>9} {'':>8} {'-':>7} {'-':>8}", flush=True)
            continue
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return 1
        row = {"topology": name, **json.loads(out.stdout.strip().splitlines()[-1])}
        flows = row["maxflows"] if row["maxflows"] is not None else "-"
        print(json.dumps(row) if args.json else
              f"{name:24} {row['ranks']:>6} {row['method']:>12} {row['k']:>3} {row['trees']:>6} "
              f"{flows:>9} {row['seconds']:>9.2f} {row['cpu_seconds']:>8.2f} "
              f"{'yes' if row['optimal'] else 'NO':>7} {row['peak_rss_bytes'] / 2**20:>8.0f}",
              flush=True)
    if not args.json:
        print("\nmethod: what auto (or the named method) used; optimal: achieved == cut bound as "
              "exact rationals (forestcc.algorithms.evaluate_trees, independent of the generator).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
