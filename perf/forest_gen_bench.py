#!/usr/bin/env python3
"""ForestColl generation speed: forestcc against the authors' public implementation.

Prints, for each topology, the time to generate an optimal all_gather forest (bound, switch
removal, tree packing, routing, and the independent evaluation), the reference time the ForestColl
authors' Python code took on a comparable 2-core machine, the speedup, whether the forest met the
cut bound exactly, and the peak memory of the process that generated it. Each case runs in its own
process so peak memory is per case. Add --json for machine-readable output.

    PYTHONPATH=python python perf/forest_gen_bench.py [--repeat 3] [--only dgx-a100x8] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

# (preset, label, reference seconds of the authors' implementation or None)
CASES = [
    ("dgx-a100x2", "2x8 A100", 2.9),
    ("dgx-a100x4", "4x8 A100", 37.9),
    ("dgx-a100x8", "8x8 A100", 460.8),
    ("mi250x4", "4x16 MI250", 127.9),
    ("a100-fattree-1024", "1024 A100 fat tree", None),
]
TARGET_SPEEDUP = 100
TARGET_1024_SECONDS = 120
TARGET_1024_BYTES = 8 << 30


def run_one(name: str, repeat: int) -> dict:
    from forestcc import topology
    from forestcc.algorithms import generate_forest
    topo = topology.preset(name)
    best = None
    forest = None
    for _ in range(repeat):
        started = time.perf_counter()
        forest = generate_forest(topo)
        elapsed = time.perf_counter() - started
        best = elapsed if best is None else min(best, elapsed)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "topology": name, "ranks": topo.num_ranks, "seconds": best, "method": forest.method,
        "k": forest.k, "trees": len(forest.trees), "optimal": forest.optimal,
        "bound_algbw": str(forest.bound_algbw), "achieved_algbw": str(forest.achieved_algbw),
        "algbw_gbps": float(forest.achieved_algbw), "maxflows": forest.stats.get("maxflows"),
        "peak_rss_bytes": usage.ru_maxrss * 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best is reported")
    parser.add_argument("--only", action="append", help="run only this preset (repeatable)")
    parser.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.repeat)))
        return 0
    rows = []
    for name, label, reference in CASES:
        if args.only and name not in args.only:
            continue
        repeat = 1 if name.startswith("a100-fattree") else args.repeat
        out = subprocess.run([sys.executable, __file__, "--child", name, "--repeat", str(repeat)],
                             capture_output=True, text=True, env=os.environ, check=False)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return 1
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["label"], row["reference_seconds"] = label, reference
        row["speedup"] = reference / row["seconds"] if reference else None
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
    if args.json:
        return 0
    print(f"{'topology':20} {'ranks':>5} {'method':>12} {'k':>3} {'trees':>6} {'maxflows':>9} "
          f"{'time s':>8} {'authors s':>9} {'speedup':>8} {'algbw GB/s':>10} {'optimal':>7} {'peak MiB':>8}")
    for r in rows:
        ref = f"{r['reference_seconds']:.1f}" if r["reference_seconds"] else "-"
        speed = f"{r['speedup']:.0f}x" if r["speedup"] else "-"
        flows = r["maxflows"] if r["maxflows"] is not None else "-"
        print(f"{r['label']:20} {r['ranks']:>5} {r['method']:>12} {r['k']:>3} {r['trees']:>6} "
              f"{flows:>9} {r['seconds']:>8.3f} {ref:>9} {speed:>8} {r['algbw_gbps']:>10.2f} "
              f"{'yes' if r['optimal'] else 'NO':>7} {r['peak_rss_bytes'] / 2**20:>8.0f}")
    print(f"\ntargets: >= {TARGET_SPEEDUP}x the authors' time on each; the 1024-GPU preset under "
          f"{TARGET_1024_SECONDS} s and {TARGET_1024_BYTES >> 30} GiB. Times include the independent "
          "evaluation of the link loads; 'optimal' means achieved == cut bound as exact rationals.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
