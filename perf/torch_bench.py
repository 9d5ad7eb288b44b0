"""forestcc against gloo through torch.distributed: DDP step time and raw all_reduce busbw.

    forestcc-run -n 2 python perf/torch_bench.py              # both parts, 2 ranks
    torchrun --nproc-per-node 4 perf/torch_bench.py --part ddp --json out.json

One launch measures both backends: the world group is forestcc's, a gloo group of the same ranks
is the peer, and every measurement alternates between them (so a burst of load from elsewhere
hits both). Rank 0 prints.

- ``--part ddp``: for each model (a small MLP, ~0.3M parameters, and a ~25M-parameter MLP), the
  median time of a DDP training step (forward, backward with DDP's bucketed gradient all-reduce,
  SGD step) on each backend, the same step under ``no_sync()`` (no communication: the compute
  floor), and the gradient all-reduce alone: every gradient, in DDP's 25 MiB buckets, all-reduced
  with ``dist.all_reduce(async_op=True)`` and waited for, as GB/s of gradient bytes (algbw) and
  busbw (× 2(n-1)/n).
- ``--part allreduce``: ``dist.all_reduce`` (float32, sum, in place) from ``-b`` to ``-e`` bytes,
  time and busbw per backend, nccl-tests style.

Each rank uses one torch thread (``--threads``): the ranks share the machine's cores.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import forestcc.torch  # noqa: F401 - registers the backend

BACKENDS = ("forestcc", "gloo")


def parse_args(argv=None) -> argparse.Namespace:
    """Command-line flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=["all", "ddp", "allreduce"], default="all")
    p.add_argument("--models", default="mlp-small,mlp-25m",
                   help="comma-separated: mlp-small, mlp-25m")
    p.add_argument("--steps", type=int, default=10,
                   help="timed DDP steps per backend (after 2 warm-up)")
    p.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    p.add_argument("-b", "--min-bytes", default="8")
    p.add_argument("-e", "--max-bytes", default="64M")
    p.add_argument("-f", "--factor", type=int, default=2, help="size multiplier between rows")
    p.add_argument("--iters", type=int, default=20,
                   help="timed all_reduce calls per size (fewer above 1 MiB)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--json", help="write the results here (rank 0)")
    return p.parse_args(argv)


def parse_size(text: str) -> int:
    """'64M' -> 67108864 (K, M, G are powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def make_model(name: str) -> tuple[nn.Module, int]:
    """(model, input features) for ``name``: mlp-small (~0.3M parameters) or mlp-25m."""
    torch.manual_seed(0)
    if name == "mlp-small":
        width, depth, features = 512, 2, 64
    elif name == "mlp-25m":
        width, depth, features = 2048, 6, 2048
    else:
        raise SystemExit(f"unknown model {name!r}")
    layers, d = [], features
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.ReLU()]
        d = width
    layers.append(nn.Linear(d, 16))
    return nn.Sequential(*layers), features


def median_time(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls, all ranks starting together."""
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    # every rank's time counts: the slowest rank is the step time
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return statistics.median(t.tolist())


def bench_ddp(args, groups) -> list[dict]:
    """DDP step, no_sync step and bucketed gradient all-reduce per model and backend."""
    n = dist.get_world_size()
    rows = []
    for model_name in args.models.split(","):
        base, features = make_model(model_name)
        params = sum(p.numel() for p in base.parameters())
        grad_bytes = params * 4
        wrapped = {}
        for b in BACKENDS:
            m, _ = make_model(model_name)
            ddp = DDP(m, process_group=groups[b])
            wrapped[b] = (ddp, torch.optim.SGD(ddp.parameters(), lr=1e-3))
        x = torch.randn(args.batch, features)
        y = torch.randn(args.batch, 16)

        def step(b, sync=True):
            ddp, opt = wrapped[b]
            opt.zero_grad(set_to_none=False)
            if sync:
                nn.functional.mse_loss(ddp(x), y).backward()
            else:
                with ddp.no_sync():
                    nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()

        # DDP's buckets: 25 MiB of gradients each (the first one 1 MiB)
        buckets = _buckets(params)

        def grad_allreduce(b):
            works = [dist.all_reduce(t, group=groups[b], async_op=True) for t in buckets]
            for w in works:
                w.wait()

        for b in BACKENDS:  # warm-up
            for _ in range(2):
                step(b)
            grad_allreduce(b)
        result = {b: {"step": [], "no_sync": [], "allreduce": []} for b in BACKENDS}
        for _ in range(args.steps):  # interleaved: load from elsewhere hits both backends
            for b in BACKENDS:
                result[b]["step"].append(median_time(lambda: step(b), 1))
                result[b]["allreduce"].append(median_time(lambda: grad_allreduce(b), 1))
        for b in BACKENDS:
            for _ in range(max(3, args.steps // 3)):
                result[b]["no_sync"].append(median_time(lambda: step(b, sync=False), 1))
        for b in BACKENDS:
            r = {k: statistics.median(v) for k, v in result[b].items()}
            algbw = grad_bytes / r["allreduce"] / 1e9
            rows.append(dict(model=model_name, params=params, backend=b, ranks=n,
                             step_ms=r["step"] * 1e3, no_sync_ms=r["no_sync"] * 1e3,
                             allreduce_ms=r["allreduce"] * 1e3, algbw_gbps=algbw,
                             busbw_gbps=algbw * 2 * (n - 1) / n))
    return rows


def _buckets(params: int) -> list[torch.Tensor]:
    cap = 25 * (1 << 20) // 4
    sizes, left, first = [], params, (1 << 20) // 4
    take = min(first, left)
    sizes.append(take)
    left -= take
    while left > 0:
        take = min(cap, left)
        sizes.append(take)
        left -= take
    return [torch.ones(s) for s in sizes]


def bench_allreduce(args, groups) -> list[dict]:
    """dist.all_reduce time and busbw per size and backend: every call timed on its own, in
    five rounds that alternate between the backends; the median call (the slowest rank's) is
    reported, so a rank descheduled by load from elsewhere spoils single calls, not the row."""
    n = dist.get_world_size()
    rows = []
    size = max(4, parse_size(args.min_bytes))
    last = parse_size(args.max_bytes)
    while size <= last:
        count = max(1, size // 4)
        tensors = {b: torch.ones(count) for b in BACKENDS}
        iters = max(2, min(args.iters, int(args.iters * (1 << 20) / max(size, 1))))
        per = {b: [] for b in BACKENDS}
        for b in BACKENDS:  # warm-up
            for _ in range(2):
                dist.all_reduce(tensors[b], group=groups[b])
        for _ in range(5):
            for b in BACKENDS:
                g, t = groups[b], tensors[b]
                dist.barrier()
                for _ in range(iters):
                    start = time.perf_counter()
                    dist.all_reduce(t, group=g)
                    per[b].append(time.perf_counter() - start)
        row = dict(bytes=count * 4, count=count, ranks=n)
        medians = torch.tensor([statistics.median(per[b]) for b in BACKENDS], dtype=torch.float64)
        dist.all_reduce(medians, op=dist.ReduceOp.MAX)
        for b, sec in zip(BACKENDS, medians.tolist()):
            row[f"{b}_us"] = sec * 1e6
            row[f"{b}_busbw"] = count * 4 / sec / 1e9 * 2 * (n - 1) / n
        rows.append(row)
        size *= args.factor
    return rows


def main(argv=None) -> None:
    """Run the chosen parts and print their tables on rank 0."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    dist.init_process_group("forestcc")
    groups = {"forestcc": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    rank, n = dist.get_rank(), dist.get_world_size()
    out = {"ranks": n, "torch": torch.__version__, "threads": args.threads}
    say = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    say(f"# torch {torch.__version__}, {n} ranks, {args.threads} torch thread(s) per rank, "
        f"{os.cpu_count()} CPUs")
    if args.part in ("all", "ddp"):
        rows = bench_ddp(args, groups)
        out["ddp"] = rows
        say("# DDP step (median over steps; the slowest rank's time), gradient all-reduce in "
            "DDP's 25 MiB buckets")
        say(f"# {'model':>10} {'params':>9} {'backend':>9} {'step ms':>9} {'no_sync ms':>10} "
            f"{'grad AR ms':>10} {'algbw GB/s':>10} {'busbw GB/s':>10}")
        for r in rows:
            say(f"  {r['model']:>10} {r['params']:>9} {r['backend']:>9} {r['step_ms']:>9.2f} "
                f"{r['no_sync_ms']:>10.2f} {r['allreduce_ms']:>10.2f} {r['algbw_gbps']:>10.2f} "
                f"{r['busbw_gbps']:>10.2f}")
        by = {(r["model"], r["backend"]): r for r in rows}
        for model in dict.fromkeys(r["model"] for r in rows):
            f, g = by[(model, "forestcc")], by[(model, "gloo")]
            say(f"# {model}: forestcc/gloo gradient all-reduce throughput "
                f"{f['algbw_gbps'] / g['algbw_gbps']:.2f}x, step time "
                f"{g['step_ms'] / f['step_ms']:.2f}x faster")
    if args.part in ("all", "allreduce"):
        rows = bench_allreduce(args, groups)
        out["allreduce"] = rows
        say("# dist.all_reduce float32 sum in place: median call time (us; the slowest rank's) "
            "and busbw (GB/s)")
        say(f"# {'size(B)':>10} {'count':>10} {'forestcc us':>12} {'busbw':>8} {'gloo us':>12} "
            f"{'busbw':>8} {'speedup':>8}")
        for r in rows:
            say(f"  {r['bytes']:>10} {r['count']:>10} {r['forestcc_us']:>12.1f} "
                f"{r['forestcc_busbw']:>8.3f} {r['gloo_us']:>12.1f} {r['gloo_busbw']:>8.3f} "
                f"{r['gloo_us'] / r['forestcc_us']:>8.2f}")
    if args.json and rank == 0:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
