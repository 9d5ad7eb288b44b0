"""Collectives on one GPU shared by several processes (CUDA IPC), against the GPU's own bounds.

    forestcc-run -n 4 python3 perf/gpu/gpu_bench.py [--json out.json] [-b 8] [-e 1G] [-f 2] [--algo A]
    python3 perf/gpu/gpu_bench.py --self-test     # table and JSON from made-up timings, no GPU

all_reduce (sum), all_gather and all_to_all of float32 PyTorch CUDA tensors from
forestcc.cuda.empty, algo="auto" (or --algo), out of place, on one stream: warm-up calls, then CUDA events
around a loop of calls; the time is the mean over ranks (nccl-tests' -a 1). algbw and busbw use
nccl-tests' formulas (forestcc_perf.busbw; size = the larger buffer). Every size is checked
once before it is timed (#wrong). Then rank 0 alone (the others wait on the host) measures the
bounds: a device-to-device copy (bytes read + written per second) and PyTorch reducing the
same n buffers in one process (torch.sum of a stacked tensor, and a chain of adds). No NCCL: it
refuses two ranks on one GPU. Rank 0 prints the tables; --json writes everything.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from forestcc_perf.busbw import algbw_gbps, busbw_gbps

COLLECTIVES = ("all_reduce", "all_gather", "all_to_all")
LATENCY_MAX = 64 << 10
ELEMENT = 4  # float32


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


def sizes_between(lo: int, hi: int, factor: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def iterations(size: int) -> tuple[int, int]:
    """(warm-up, timed) calls: fewer for large sizes, where one call takes milliseconds."""
    if size <= 1 << 20:
        return 5, 20
    if size <= 64 << 20:
        return 3, 10
    return 1, 3


def count_for(collective: str, size: int, n: int) -> int:
    """Elements per block (nccl-tests' count column): all_reduce's buffer, all_gather's input,
    all_to_all's block per peer; at least 1."""
    per = size // ELEMENT if collective == "all_reduce" else size // (ELEMENT * n)
    return max(1, per)


def table_size(collective: str, count: int, n: int) -> int:
    return count * ELEMENT * (1 if collective == "all_reduce" else n)


def row(collective: str, count: int, n: int, times_us: list[float], wrong: int, iters: int) -> dict:
    size = table_size(collective, count, n)
    t = sum(times_us) / len(times_us)
    redop = "sum" if collective == "all_reduce" else "none"
    return {"size": size, "count": count, "type": "float", "redop": redop, "root": -1, "time_us": t, "time_us_min": min(times_us),
            "time_us_max": max(times_us), "algbw_gbps": algbw_gbps(size, t),
            "busbw_gbps": busbw_gbps(collective, size, t, n), "wrong": wrong, "iters": iters}


def format_table(collective: str, rows: list[dict], n: int, algo: str = "auto") -> str:
    lines = [f"# Collective: {collective}, {n} processes on one GPU, out-of-place, algo={algo}",
             "#" + " " * 56 + "out-of-place",
             (f"#{'size':>11} {'count':>13} {'type':>9} {'redop':>7} {'root':>7} {'time':>10} "
              f"{'algbw':>7} {'busbw':>7} {'#wrong':>7}"),
             (f"#{'(B)':>11} {'(elements)':>13} {'':>9} {'':>7} {'':>7} {'(us)':>10} "
              f"{'(GB/s)':>7} {'(GB/s)':>7}")]
    for r in rows:
        lines.append(f" {r['size']:>11} {r['count']:>13} {r['type']:>9} {r['redop']:>7} "
                     f"{r['root']:>7} {r['time_us']:>10.2f} {r['algbw_gbps']:>7.2f} "
                     f"{r['busbw_gbps']:>7.2f} {r['wrong']:>7}")
    wrong = sum(r["wrong"] for r in rows)
    avg = sum(r["busbw_gbps"] for r in rows) / len(rows) if rows else 0.0
    lines += [f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
              f"# Avg bus bandwidth    : {avg:.3f}",
              f"# Collective test concluded: {collective}"]
    lat = [f"{r['size']} B {r['time_us']:.1f}" for r in rows if r["size"] <= LATENCY_MAX]
    if lat:
        lines.append(f"# Latency (us), sizes up to {LATENCY_MAX >> 10} KiB: " + ", ".join(lat))
    return "\n".join(lines)


def format_local(local: list[dict]) -> str:
    lines = ["# Bounds, rank 0 alone on the GPU (the others wait on the host)",
             (f"#{'size':>11} {'d2d copy':>10} {'copy':>9} {'sum(stack)':>11} {'sum':>8} "
              f"{'sum':>8} {'add chain':>10} {'adds':>8}"),
             (f"#{'(B)':>11} {'(us)':>10} {'(GB/s)*':>9} {'(us)':>11} {'(GB/s)':>8} "
              f"{'(GB/s)*':>8} {'(us)':>10} {'(GB/s)':>8}")]
    for r in local:
        lines.append(f" {r['size']:>11} {r['copy_us']:>10.1f} {r['copy_gbps']:>9.1f} "
                     f"{r['sum_us']:>11.1f} {r['sum_gbps']:>8.1f} {r['sum_traffic_gbps']:>8.1f} "
                     f"{r['adds_us']:>10.1f} {r['adds_gbps']:>8.1f}")
    lines.append("# (GB/s)* counts every byte read and written (copy: 2 x size; sum of n "
                 "buffers: (n + 1) x size); (GB/s) is size / time, comparable with all_reduce's "
                 "algbw")
    return "\n".join(lines)


def mps_state() -> str:
    given = os.environ.get("FORESTCC_GPU_MPS")
    if given:
        return given
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    return "running (control pipe found)" if os.path.exists(os.path.join(pipe, "control")) \
        else "not running (no control pipe)"


# -- the measurement ----------------------------------------------------------------------------

def run(args) -> int:
    import numpy as np
    import torch

    import forestcc
    import forestcc.cuda

    comm = forestcc.init()
    n, rank = comm.size, comm.rank
    if not forestcc.cuda.is_available():
        print(f"gpu_bench: rank {rank}: forestcc.cuda.is_available() is False (built with CUDA: "
              f"{forestcc.cuda.built_with_cuda()}, devices: {forestcc.cuda.device_count()})",
              file=sys.stderr)
        return 1
    torch.cuda.set_device(comm.local_rank % torch.cuda.device_count())
    dev = torch.cuda.current_device()

    def host_gather(value) -> list:
        return [json.loads(b) for b in comm.all_gather_bytes(json.dumps(value).encode())]

    sizes = sizes_between(args.minbytes, args.maxbytes, args.stepfactor)
    biggest = max(table_size(c, count_for(c, s, n), n) for c in COLLECTIVES for s in sizes)
    elems = biggest // ELEMENT
    src = forestcc.cuda.empty(elems, dtype=np.float32, like="torch")
    dst = forestcc.cuda.empty(elems, dtype=np.float32, like="torch")
    stream = torch.cuda.Stream()
    facts = host_gather({"rank": rank, "pid": os.getpid(), "host": platform.node(), "device": dev,
                         "name": torch.cuda.get_device_name(dev)})
    if rank == 0:
        print(f"# forestcc GPU benchmark: {n} processes on one GPU (CUDA IPC), float32, "
              f"CUDA events on one stream, time = mean over ranks")
        print(f"# forestcc {forestcc.__version__}, torch {torch.__version__}, python "
              f"{platform.python_version()}, MPS: {mps_state()}")
        for f in facts:
            print(f"#  Rank {f['rank']:2d} Pid {f['pid']:7d} on {f['host']} device {f['device']} "
                  f"{f['name']}")
        sys.stdout.flush()

    def fill_and_expect(collective, count):
        """Inputs from (rank, block); returns (output view, expected values per block)."""
        if collective == "all_reduce":
            x, out = src[:count], dst[:count]
            x.fill_(rank + 1)
            return x, out, torch.full((1, 1), n * (n + 1) / 2, device="cuda")
        out = dst[:count * n]
        blocks = torch.arange(n, device="cuda", dtype=torch.float32)
        if collective == "all_gather":
            x = src[:count]
            x.fill_(rank + 1)
            return x, out, (blocks + 1).view(n, 1)
        x = src[:count * n]  # all_to_all: block p of rank r holds r * n + p
        x.view(n, count).copy_((rank * n + blocks).view(n, 1).expand(n, count))
        return x, out, (blocks * n + rank).view(n, 1)

    def call(collective, x, out):
        if collective == "all_reduce":
            comm.all_reduce(x, out=out, stream=stream, algo=args.algo)
        elif collective == "all_gather":
            comm.all_gather(out, x, stream=stream, algo=args.algo)
        else:
            comm.all_to_all(out, x, stream=stream, algo=args.algo)

    results = {c: [] for c in COLLECTIVES}
    skipped, start, last_step = [], time.monotonic(), 0.0
    for size in sizes:
        # Rank 0 decides whether the next size fits the time budget; everyone follows.
        elapsed = time.monotonic() - start
        go = host_gather(elapsed + last_step * args.stepfactor * 1.5 < args.budget)[0]
        if not go:
            skipped.append(size)
            continue
        step_start = time.monotonic()
        warm, iters = iterations(size)
        for collective in COLLECTIVES:
            count = count_for(collective, size, n)
            if any(r["count"] == count for r in results[collective]):
                continue  # a small size rounded up to one already measured
            with torch.cuda.stream(stream):
                x, out, expect = fill_and_expect(collective, count)
                out.fill_(-1)
                call(collective, x, out)
                wrong = int((out.view(expect.shape[0], -1) != expect).sum().item())
                for _ in range(warm):
                    call(collective, x, out)
            stream.synchronize()
            comm.synchronize()
            host_gather(0)  # every rank enqueues its timed loop together
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                begin.record(stream)
                for _ in range(iters):
                    call(collective, x, out)
                end.record(stream)
            end.synchronize()
            comm.synchronize()
            t = begin.elapsed_time(end) * 1e3 / iters
            gathered = host_gather([t, wrong])
            results[collective].append(row(collective, count, n, [g[0] for g in gathered],
                                           sum(g[1] for g in gathered), iters))
        last_step = time.monotonic() - step_start
    collective_seconds = time.monotonic() - start

    local = []
    if rank == 0:
        local = measure_bounds(torch, src, dst, n, [s for s in sizes if s >= 1 << 20
                                                    and s not in skipped], args.stepfactor)
    host_gather(0)  # the others wait here (on the host) while rank 0 measures
    if rank != 0:
        return 0
    report = {"benchmark": "forestcc perf/gpu", "nranks": n, "mps": mps_state(),
              "device": facts[0]["name"], "torch": torch.__version__,
              "forestcc": forestcc.__version__, "dtype": "float32", "algo": args.algo,
              "collectives": results, "bounds": local, "skipped_sizes": skipped,
              "collective_seconds": round(collective_seconds, 1)}
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if any(r["wrong"] for rows in results.values() for r in rows) else 0


def measure_bounds(torch, src, dst, n, sizes, factor) -> list[dict]:
    """Rank 0 alone: d2d copy and a one-process reduction of n buffers, at sizes >= 1 MiB
    (every fourth one when stepping by 2, plus the largest)."""
    if factor < 4:
        sizes = sorted(set(sizes[::2] + sizes[-1:]))
    return [bounds_at(torch, src, dst, n, size) for size in sizes]


def bounds_at(torch, src, dst, n, size) -> dict:
    count = size // ELEMENT
    warm, iters = iterations(size)
    a, b = src[:count], dst[:count]
    stack = torch.ones((n, count), dtype=torch.float32, device="cuda")
    copy_us = time_loop(torch, lambda: b.copy_(a), warm, iters)
    sum_us = time_loop(torch, lambda: torch.sum(stack, dim=0, out=b), warm, iters)

    def adds():
        torch.add(stack[0], stack[1], out=b)
        for i in range(2, n):
            b.add_(stack[i])
    adds_us = time_loop(torch, adds, warm, iters)
    return {"size": size, "copy_us": copy_us, "copy_gbps": algbw_gbps(2 * size, copy_us),
            "sum_us": sum_us, "sum_gbps": algbw_gbps(size, sum_us),
            "sum_traffic_gbps": algbw_gbps((n + 1) * size, sum_us),
            "adds_us": adds_us, "adds_gbps": algbw_gbps(size, adds_us)}


def time_loop(torch, body, warm, iters) -> float:
    for _ in range(warm):
        body()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(iters):
        body()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) * 1e3 / iters


def print_report(report: dict) -> None:
    n = report["nranks"]
    for collective, rows in report["collectives"].items():
        print()
        print(format_table(collective, rows, n, report["algo"]))
    if report["skipped_sizes"]:
        print(f"# Skipped (time budget): sizes {report['skipped_sizes']}")
    print()
    if report["bounds"]:
        print(format_local(report["bounds"]))
        big = report["bounds"][-1]
        print(f"# HBM bound: d2d copy of {big['size']} B at {big['copy_gbps']:.1f} GB/s "
              f"(read + written); one process reduces {n} buffers of that size at "
              f"{big['sum_gbps']:.1f} GB/s (size / time)")
    print(f"# MPS: {report['mps']}; collectives took {report['collective_seconds']} s")
    sys.stdout.flush()


def self_test() -> int:
    """Tables and JSON from made-up timings: checks the formatting and formulas without a GPU."""
    n = 4
    sizes = sizes_between(8, 1 << 30, 2)
    results = {}
    for c in COLLECTIVES:
        results[c] = []
        for s in sizes:
            count = count_for(c, s, n)
            if any(r["count"] == count for r in results[c]):
                continue
            t = 20.0 + table_size(c, count, n) / 500e3  # 20 us + 500 GB/s
            results[c].append(row(c, count, n, [t, t * 1.1, t * 0.9, t], 0, iterations(s)[1]))
    ar = {r["size"]: r for r in results["all_reduce"]}[1 << 30]
    expect = (1 << 30) / (ar["time_us"] * 1e3) * 2 * 3 / 4
    assert abs(ar["busbw_gbps"] - expect) < 1e-9, (ar, expect)
    assert results["all_gather"][0]["size"] == ELEMENT * n  # 8 B rounds up to one element each
    bounds = [{"size": s, "copy_us": s / 1.5e6, "copy_gbps": 3000.0, "sum_us": s / 0.6e6,
               "sum_gbps": 600.0, "sum_traffic_gbps": 3000.0, "adds_us": s / 0.3e6,
               "adds_gbps": 300.0} for s in sizes if s >= 1 << 20][::2]
    report = {"benchmark": "forestcc perf/gpu (self-test: made-up timings)", "nranks": n,
              "mps": "self-test", "device": "none", "torch": "none", "forestcc": "none",
              "dtype": "float32", "algo": "auto", "collectives": results, "bounds": bounds,
              "skipped_sizes": [], "collective_seconds": 0.0}
    print_report(report)
    json.loads(json.dumps(report))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-b", "--minbytes", type=parse_size, default=8)
    p.add_argument("-e", "--maxbytes", type=parse_size, default=1 << 30)
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("--budget", type=float, default=200.0,
                   help="seconds for the collectives; larger sizes are skipped past it (200)")
    p.add_argument("--json", default=None, help="write the results here (rank 0)")
    p.add_argument("--algo", default="auto",
                   help="algorithm of every call (auto); e.g. eager, for the sizes its banks hold")
    p.add_argument("--self-test", action="store_true",
                   help="print the tables from made-up timings (no GPU, no launcher)")
    args = p.parse_args()
    if args.stepfactor < 2:
        p.error("-f must be 2 or more")
    return self_test() if args.self_test else run(args)


if __name__ == "__main__":
    sys.exit(main())
