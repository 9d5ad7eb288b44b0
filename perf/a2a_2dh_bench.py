"""Flat against 2DH all_to_all and all_to_all_v across hosts (issue 14's benchmark).

Run it as every rank of a job on several nodes, e.g. on emulated hosts:

    forestcc-cluster run --hosts 2 --ranks-per-host 2 -- python perf/a2a_2dh_bench.py
    forestcc-cluster run --hosts 4 --ranks-per-host 2 --rate 10gbit -- python perf/a2a_2dh_bench.py --json out.json

For each per-rank send size (1 KiB to 64 MiB by default) it times all_to_all with the flat plans
(`pairwise`, `direct`) and `2dh`, and all_to_all_v with `direct` and `2dh` on splits that vary
per pair (the same total per rank as all_to_all, so the rows compare). Rank 0 prints a table
(time in us, the max over ranks of each rank's mean, and the 2dh speedup over the best flat
plan) and optionally writes JSON. Every result is checked against numpy once per size.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

import forestcc

FLAT = ("pairwise", "direct")
FLAT_V = ("direct",)


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def splits_for(n: int, per_peer: int, rng: np.random.Generator) -> np.ndarray:
    """splits[src][dst] in elements: per-pair counts around per_peer (0.5x to 1.5x), each row
    summing to per_peer * n so all_to_all_v moves as much as all_to_all."""
    raw = rng.uniform(0.5, 1.5, size=(n, n))
    splits = np.floor(raw / raw.sum(axis=1, keepdims=True) * per_peer * n).astype(np.int64)
    splits[:, 0] += per_peer * n - splits.sum(axis=1)
    return splits


def timed(comm, call, iters: int, warmup: int) -> float:
    for _ in range(warmup):
        call()
    comm.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    mine = np.array([(time.perf_counter() - start) / iters * 1e6])
    worst = np.empty(1)
    comm.all_reduce(mine, op="max", out=worst)
    return float(worst[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-b", "--minbytes", default="1K", help="smallest per-rank send size (1K)")
    ap.add_argument("-e", "--maxbytes", default="64M", help="largest per-rank send size (64M)")
    ap.add_argument("-f", "--stepfactor", type=int, default=4, help="size step factor (4)")
    ap.add_argument("--json", help="write the rows to this file (rank 0)")
    args = ap.parse_args()
    comm = forestcc.init()
    n, rank = comm.size, comm.rank
    nodes = len({comm.node_of(r) for r in range(n)})
    rng = np.random.default_rng(7)
    rows = []
    size = parse_size(args.minbytes)
    while size <= parse_size(args.maxbytes):
        per_peer = max(1, size // 4 // n)  # float32 elements per peer
        iters = max(3, min(200, (64 << 20) // max(size, 1) // 4))
        warmup = max(1, iters // 5)
        x = np.arange(per_peer * n, dtype=np.float32) + rank * 1e3
        out = np.empty_like(x)
        row = {"bytes": per_peer * n * 4, "ranks": n, "nodes": nodes}
        want = np.concatenate([np.arange(per_peer * n, dtype=np.float32)[rank * per_peer:(rank + 1) * per_peer]
                               + q * 1e3 for q in range(n)])
        for algo in FLAT + ("2dh",):
            comm.all_to_all(out, x, algo=algo)
            assert np.array_equal(out, want), f"all_to_all {algo} {size}: wrong result on rank {rank}"
            row[f"a2a_{algo}_us"] = timed(comm, lambda a=algo: comm.all_to_all(out, x, algo=a), iters, warmup)
        splits = splits_for(n, per_peer, rng)
        xv = np.arange(int(splits[rank].sum()), dtype=np.float32) + rank * 1e7
        outv = np.empty(int(splits[:, rank].sum()), dtype=np.float32)
        wantv = np.concatenate([np.arange(int(splits[q].sum()), dtype=np.float32)
                                [int(splits[q, :rank].sum()):][:int(splits[q, rank])] + q * 1e7 for q in range(n)])
        for algo in FLAT_V + ("2dh",):
            comm.all_to_all_v(outv, xv, splits[:, rank].tolist(), splits[rank].tolist(), algo=algo)
            assert np.array_equal(outv, wantv), f"all_to_all_v {algo} {size}: wrong result on rank {rank}"
            row[f"a2av_{algo}_us"] = timed(
                comm, lambda a=algo: comm.all_to_all_v(outv, xv, splits[:, rank].tolist(), splits[rank].tolist(),
                                                       algo=a), iters, warmup)
        rows.append(row)
        size *= args.stepfactor
    if rank == 0:
        print(f"# {n} ranks on {nodes} nodes; time per call in us (max over ranks); "
              "x = best flat / 2dh (> 1: 2dh faster)")
        head = ["bytes"] + [f"a2a {a}" for a in FLAT + ("2dh",)] + ["x"] + [f"a2av {a}" for a in FLAT_V + ("2dh",)] + ["x"]
        print(" | ".join(f"{h:>12}" for h in head))
        for r in rows:
            flat = min(r[f"a2a_{a}_us"] for a in FLAT)
            flat_v = min(r[f"a2av_{a}_us"] for a in FLAT_V)
            cells = [r["bytes"]] + [f"{r[f'a2a_{a}_us']:.1f}" for a in FLAT + ("2dh",)] + \
                    [f"{flat / r['a2a_2dh_us']:.2f}"] + [f"{r[f'a2av_{a}_us']:.1f}" for a in FLAT_V + ("2dh",)] + \
                    [f"{flat_v / r['a2av_2dh_us']:.2f}"]
            print(" | ".join(f"{c:>12}" for c in cells))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
