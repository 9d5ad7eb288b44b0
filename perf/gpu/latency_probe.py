"""Where a small GPU collective's time goes: host enqueue vs the GPU, per call.

    forestcc-run -n 4 python3 perf/gpu/latency_probe.py [--json out.json] [--iters 200] [--algo A]

For all_reduce, all_gather and all_to_all of float32 PyTorch CUDA tensors (forestcc.cuda.empty),
algo="auto" (or --algo, e.g. eager: FORESTCC_PACKETS=on/off compares packets with signals), out
of place, at a few small sizes, rank 0 prints per call (mean over ranks):
  eager_us   CUDA events around a loop of calls on one stream (what gpu_bench.py reports)
  host_us    host time to enqueue one call (perf_counter around the same loop, before syncing)
  graph_us   the same calls captured once into a CUDA graph and replayed: the GPU's time alone,
             with no host work between kernels
  numpy_us   the same call on host (numpy) memory: the host path without CUDA
eager_us near host_us means the host is the bound; near graph_us, the GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

SIZES = (8, 1024, 65536)
COLLECTIVES = ("all_reduce", "all_gather", "all_to_all")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200, help="calls per timed loop")
    parser.add_argument("--graph-calls", type=int, default=20, help="calls captured in one graph")
    parser.add_argument("--json", help="write the results here (rank 0)")
    parser.add_argument("--collectives", default=",".join(COLLECTIVES), help="comma-separated")
    parser.add_argument("--algo", default="auto", help="algorithm of every call (auto)")
    args = parser.parse_args()

    import numpy as np
    import torch

    import forestcc
    import forestcc.cuda

    comm = forestcc.init()
    n, rank = comm.size, comm.rank
    torch.cuda.set_device(comm.local_rank % torch.cuda.device_count())

    def host_gather(value):
        return [json.loads(b) for b in comm.all_gather_bytes(json.dumps(value).encode())]

    elems = max(SIZES) * n // 4
    src = forestcc.cuda.empty(elems, dtype=np.float32, like="torch")
    dst = forestcc.cuda.empty(elems, dtype=np.float32, like="torch")
    src.fill_(1)
    hsrc, hdst = np.ones(elems, np.float32), np.zeros(elems, np.float32)
    stream = torch.cuda.Stream()

    def call(collective, x, out, **kw):
        kw["algo"] = args.algo
        if collective == "all_reduce":
            comm.all_reduce(x, out=out, **kw)
        elif collective == "all_gather":
            comm.all_gather(out, x, **kw)
        else:
            comm.all_to_all(out, x, **kw)

    def views(collective, size, a, b):
        count = max(1, size // 4 if collective == "all_reduce" else size // (4 * n))
        if collective == "all_reduce":
            return a[:count], b[:count]
        if collective == "all_gather":
            return a[:count], b[:count * n]
        return a[:count * n], b[:count * n]

    rows = []
    # CUDA MPS's own cost: a graph of tiny kernels replayed in every process at once.
    tiny = torch.zeros(1, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        tiny.add_(1)
        stream.synchronize()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(args.graph_calls):
                tiny.add_(1)
        stream.synchronize()
        host_gather(0)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record(stream)
        for _ in range(10):
            g.replay()
        end.record(stream)
    end.synchronize()
    noop = host_gather(begin.elapsed_time(end) * 1e3 / (10 * args.graph_calls))
    if rank == 0:
        print(f"# a tiny kernel in a replayed graph, all processes at once: {sum(noop) / n:.2f} us per kernel")
    del g
    for collective in (c for c in COLLECTIVES if c in args.collectives.split(",")):
        for size in SIZES:
            x, out = views(collective, size, src, dst)
            hx, hout = views(collective, size, hsrc, hdst)
            with torch.cuda.stream(stream):
                for _ in range(10):
                    call(collective, x, out, stream=stream)
            stream.synchronize()
            comm.synchronize()
            host_gather(0)
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                t0 = time.perf_counter()
                begin.record(stream)
                for _ in range(args.iters):
                    call(collective, x, out, stream=stream)
                end.record(stream)
                host = (time.perf_counter() - t0) * 1e6 / args.iters
            end.synchronize()
            comm.synchronize()
            eager = begin.elapsed_time(end) * 1e3 / args.iters

            # The GPU alone: a graph of calls, replayed (every rank replays it as often).
            host_gather(0)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=stream):
                for _ in range(args.graph_calls):
                    call(collective, x, out, stream=stream)
            stream.synchronize()
            host_gather(0)
            replays = max(1, args.iters // args.graph_calls)
            with torch.cuda.stream(stream):
                g.replay()
                stream.synchronize()
                host_gather(0)
                begin.record(stream)
                for _ in range(replays):
                    g.replay()
                end.record(stream)
            end.synchronize()
            graph = begin.elapsed_time(end) * 1e3 / (replays * args.graph_calls)
            comm.synchronize()
            del g

            host_gather(0)
            for _ in range(10):
                call(collective, hx, hout)
            t0 = time.perf_counter()
            for _ in range(args.iters):
                call(collective, hx, hout)
            numpy_us = (time.perf_counter() - t0) * 1e6 / args.iters
            got = host_gather([eager, host, graph, numpy_us])
            mean = [sum(v[i] for v in got) / n for i in range(4)]
            rows.append({"collective": collective, "size": size, "eager_us": mean[0], "host_us": mean[1],
                         "graph_us": mean[2], "numpy_us": mean[3]})
    if rank == 0:
        print(f"# latency probe: {n} processes on one GPU, float32, out of place, algo {args.algo}")
        print(f"{'collective':>12} {'bytes':>8} {'eager_us':>9} {'host_us':>9} {'graph_us':>9} {'numpy_us':>9}")
        for r in rows:
            print(f"{r['collective']:>12} {r['size']:>8} {r['eager_us']:9.2f} {r['host_us']:9.2f} "
                  f"{r['graph_us']:9.2f} {r['numpy_us']:9.2f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
