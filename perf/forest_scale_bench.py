#!/usr/bin/env python3
"""ForestColl generation at cluster scale, on uniform and non-uniform fat trees.

Real clusters are never perfectly uniform. Each case is a preset (the sizes the ForestColl authors
published generation times for), or a rail-optimized fat tree of DGX-A100 boxes
(``topology.presets.a100_fat_tree``), uniform or changed by ``topology.variants``: box 0 with
half-speed NICs or half its NVLink bandwidth, one GPU (b0.gpu3) with a quarter of its NVLink (most
of its NVLinks failed), with its NIC at half speed or gone, or every other box a newer generation
(NVLink x1.5, NIC x2). Each is
generated with the method the case names. Each case runs in its own process, so peak memory is per
case, and is stopped after --timeout seconds (printed as "> T s"). Prints, per case: ranks, the
method that produced the forest, wall and CPU seconds (the generic path's switch removal and
packing run two checks at a time, so on an idle 2-core machine wall seconds are below CPU
seconds; on a shared one CPU seconds are the steadier number), max-flows run, whether achieved == bound exactly, peak memory, and the
authors' published time where there is one (their Python code, 2-core machine,
/work/shared/reference/algorithms.md). With --json, the generic path's wall and CPU seconds per
step (bound, switch removal, packing, shallowing, routing) and the max-flows of switch removal and
packing too.

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

# (name, topology: "preset:NAME", "fattree:BOXES:CHANGE", "torus:ROWSxCOLS" or "mi250:BOXES",
# method, ranks, published seconds). The torus, MI250 and blocking fat tree (spine uplinks at half
# the leaves' downlinks) have no box shape the rotation applies to: auto takes the generic path.
CASES = [
    ("dgx-a100x2", "preset:dgx-a100x2", "auto", 16, 2.9),
    ("dgx-a100x4", "preset:dgx-a100x4", "auto", 32, 37.9),
    ("dgx-a100x8", "preset:dgx-a100x8", "auto", 64, 460.8),
    ("mi250x4", "preset:mi250x4", "auto", 64, 127.9),
    ("fattree-128-nic/2", "fattree:16:nic", "auto", 128, None),
    ("fattree-128-nvlink/2", "fattree:16:nvlink", "auto", 128, None),
    ("fattree-128-gpu-nvlink/4", "fattree:16:gpu-nvlink", "auto", 128, None),
    ("fattree-128-gpu-nic/2", "fattree:16:gpu-nic", "auto", 128, None),
    ("fattree-128-gpu-nic-gone", "fattree:16:gpu-nic-gone", "auto", 128, None),
    ("fattree-128-mixed", "fattree:16:mixed", "auto", 128, None),
    ("fattree-128-nvlink/2-generic", "fattree:16:nvlink", "generic", 128, None),
    ("fattree-128-generic", "fattree:16:-", "generic", 128, None),
    ("fattree-256", "fattree:32:-", "auto", 256, None),
    ("fattree-256-generic", "fattree:32:-", "generic", 256, None),
    ("fattree-256-nvlink/2-generic", "fattree:32:nvlink", "generic", 256, None),
    ("fattree-512-generic", "fattree:64:-", "generic", 512, None),
    ("fattree-1024-nic/2", "fattree:128:nic", "auto", 1024, None),
    ("fattree-1024-nvlink/2", "fattree:128:nvlink", "auto", 1024, None),
    ("fattree-1024-gpu-nvlink/4", "fattree:128:gpu-nvlink", "auto", 1024, None),
    ("fattree-1024-gpu-nic/2", "fattree:128:gpu-nic", "auto", 1024, None),
    ("fattree-1024-gpu-nic-gone", "fattree:128:gpu-nic-gone", "auto", 1024, None),
    ("fattree-1024-mixed", "fattree:128:mixed", "auto", 1024, None),
    ("fattree-1024-generic", "fattree:128:-", "generic", 1024, None),
    ("torus-16x16", "torus:16x16", "auto", 256, None),
    ("torus-32x32", "torus:32x32", "auto", 1024, None),
    ("mi250x16", "mi250:16", "auto", 256, None),
    ("mi250x64", "mi250:64", "auto", 1024, None),
    ("fattree-256-blocking", "fattree:32:blocking", "auto", 256, None),
    ("fattree-1024-blocking", "fattree:128:blocking", "auto", 1024, None),
    ("fattree-2048-generic", "fattree:256:-", "generic", 2048, None),
    ("fattree-4096-generic", "fattree:512:-", "generic", 4096, None),
    ("fattree-4096-nvlink/2", "fattree:512:nvlink", "auto", 4096, None),
    ("fattree-8192", "fattree:1024:-", "auto", 8192, None),
]


def build(spec: str):
    from fractions import Fraction

    from forestcc.topology import preset
    from forestcc.topology.presets import a100_fat_tree, mi250, torus2d
    from forestcc.topology.variants import (
        gpu_links,
        one_box_slower,
        one_gpu_slower,
        remove_links,
        scale_links,
    )
    kind, _, rest = spec.partition(":")
    if kind == "preset":
        return preset(rest)
    if kind == "torus":
        rows, cols = rest.split("x")
        return torus2d(int(rows), int(cols))
    if kind == "mi250":
        return mi250(int(rest))
    boxes, change = rest.split(":")
    topo = a100_fat_tree(int(boxes), min(16, int(boxes)))
    if change in ("nic", "nvlink"):
        topo = one_box_slower(topo, 0, change)
    elif change == "gpu-nvlink":
        topo = one_gpu_slower(topo, "b0.gpu3", "nvlink", Fraction(1, 4))
    elif change == "gpu-nic":
        topo = one_gpu_slower(topo, "b0.gpu3", "nic", Fraction(1, 2))
    elif change == "gpu-nic-gone":
        topo = remove_links(topo, gpu_links(topo, "b0.gpu3", "nic"))
    elif change == "blocking":
        topo = scale_links(topo, lambda link: "spine" in (link.src + link.dst), Fraction(1, 2))
    elif change == "mixed":
        for b in range(0, int(boxes), 2):
            topo = one_box_slower(topo, b, "nvlink", Fraction(3, 2))
            topo = one_box_slower(topo, b, "nic", Fraction(2))
    return topo


def run_case(spec: str, method: str) -> dict:
    from forestcc.algorithms import generate_forest
    topo = build(spec)
    started, cpu = time.perf_counter(), time.process_time()
    forest = generate_forest(topo, method=method)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"ranks": topo.num_ranks, "method": forest.method, "k": forest.k,
            "trees": len(forest.trees), "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu, "maxflows": forest.stats.get("maxflows"),
            "optimal": forest.optimal, "bound_algbw": str(forest.bound_algbw),
            # Per step of the generic path (C++): wall and CPU seconds (both threads: switch
            # removal and packing run two checks at a time), max-flows.
            **{key: value for key, value in forest.stats.items()
               if key.startswith(("seconds_", "cpu_seconds_", "maxflows_"))},
            "peak_rss_bytes": usage.ru_maxrss * 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-ranks", type=int, default=1024, help="skip larger cases")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per case")
    parser.add_argument("--only", action="append", help="run only this case (repeatable)")
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_case(*args.child)))
        return 0
    if not args.json:
        print(f"{'topology':28} {'ranks':>6} {'method':>12} {'k':>3} {'trees':>6} {'maxflows':>9} "
              f"{'wall s':>9} {'cpu s':>8} {'optimal':>7} {'peak MiB':>8} {'published':>9}",
              flush=True)
    for name, spec, method, ranks, published in CASES:
        if (args.only and name not in args.only) or ranks > args.max_ranks:
            continue
        paper = f"{published:.1f} s" if published is not None else "-"
        command = [sys.executable, __file__, "--child", spec, method]
        try:
            out = subprocess.run(command, capture_output=True, text=True, env=os.environ,
                                 timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            row = {"topology": name, "ranks": ranks, "timed_out_after": args.timeout,
                   "published_seconds": published}
            print(json.dumps(row) if args.json else
                  f"{name:28} {ranks:>6} {method:>12} {'':>3} {'':>6} {'':>9} "
                  f"{'> ' + format(args.timeout, '.0f'):>9} {'':>8} {'-':>7} {'-':>8} {paper:>9}",
                  flush=True)
            continue
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return 1
        row = {"topology": name, **json.loads(out.stdout.strip().splitlines()[-1]),
               "published_seconds": published}
        flows = row["maxflows"] if row["maxflows"] is not None else "-"
        print(json.dumps(row) if args.json else
              f"{name:28} {row['ranks']:>6} {row['method']:>12} {row['k']:>3} {row['trees']:>6} "
              f"{flows:>9} {row['seconds']:>9.2f} {row['cpu_seconds']:>8.2f} "
              f"{'yes' if row['optimal'] else 'NO':>7} {row['peak_rss_bytes'] / 2**20:>8.0f} "
              f"{paper:>9}", flush=True)
    if not args.json:
        print("\nmethod: what auto (or the named method) used; optimal: achieved == cut bound as "
              "exact rationals (forestcc.algorithms.evaluate_trees, independent of the generator); "
              "published: the ForestColl authors' generation time for that preset.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
