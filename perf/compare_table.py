#!/usr/bin/env python3
"""Before/after table of perf/compare_cpu.sh runs: forestcc's out-of-place / in-place time per
size and its out-of-place busbw as a multiple of Open MPI's in the same run, one column per run
folder, as markdown on stdout. Usage: perf/compare_table.py DIR [DIR ...] (each a compare_cpu.sh
OUTDIR of 2 ranks). A size missing from a run shows "-"."""
from __future__ import annotations

import json
import os
import sys

COLLECTIVES = ["all_reduce", "all_gather", "all_to_all", "sendrecv", "latency"]
MEMORIES = ["numpy", "forestcc"]
SIZES = (16, 4096, 65536, 1 << 18, 1 << 20, 4 << 20, 16 << 20, 64 << 20)  # latency: its one size


def rows(folder: str, name: str) -> dict | None:
    """{(backend, size): row} of one forestcc-perf JSON file, or None when the run has none."""
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return {(r["backend"], r["size"]): r for r in json.load(f)["rows"]}


def cell(run: dict, size: int) -> str:
    ours, mpi = run.get(("forestcc", size)), run.get(("mpi", size))
    if not ours:
        return "-"
    theirs = mpi["out_of_place"]["busbw_gbps"] if mpi else 0
    ratio = ours["out_of_place"]["busbw_gbps"] / theirs if theirs else float("nan")
    in_place = (ours["in_place"] or {}).get("time_us")  # none for sendrecv
    return f'{ours["out_of_place"]["time_us"]:.1f}/{"-" if in_place is None else f"{in_place:.1f}"} ({ratio:.2f})'


def main(folders: list[str]) -> None:
    print("| collective, memory | size | " + " | ".join(
        f"{os.path.basename(os.path.normpath(d))} forestcc oop/ip us (x MPI busbw)" for d in folders) + " |")
    print("|---|---|" + "---|" * len(folders))
    for coll in COLLECTIVES:
        for memory in MEMORIES:
            runs = [rows(d, f"{coll}_{memory}_2.json") for d in folders]
            if any(r is None for r in runs):
                continue
            for size in sorted({s for (backend, s) in runs[0] if backend == "forestcc"}):
                if coll == "latency" or size in SIZES:
                    print(f"| {coll}, {memory} | {size} | " + " | ".join(cell(r, size) for r in runs) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
