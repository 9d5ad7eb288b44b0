#!/usr/bin/env python3
"""Flat against 2DH all_to_all at 256 to 2048 ranks, 8 per node, on a modelled fabric.

    python perf/sim_2dh.py [--ranks-per-node 8] [--alpha-net-us 5] [--nic-gbps 200] ...

An analytic alpha-beta model, not the plan simulator: `forestcc plan simulate` replays every op
of a plan, and a 2048-rank all_to_all plan has about 4 million ops (flat: 2048 x 2047 puts;
2dh: 2048 x (7 x 256 + 255)), more than it handles in minutes. The model charges what the
plans do (gen_direct.cpp's all_to_all, gen_2dh.cpp), per rank, with S the bytes a rank sends
(S/n per peer), n = N nodes x m ranks:

  flat  every rank sends n-1 messages of S/n: (n-m) across the network, each costing
        alpha_net on the sender (NIC work request, proxy, wire latency), and m-1 within the
        node at alpha_intra; bytes (n-m)/n S through its share of the NIC and (m-1)/n S
        through shared memory / NVLink, overlapped:
          T = max((n-m) alpha_net + (n-m)/n S / B_nic, (m-1) alpha_intra + (m-1)/n S / B_intra)
  2dh   intra-node phase: one batch of N pieces to each of the m-1 local peers (counted as m-1
        messages: pieces of one batch go back to back over mapped memory), (m-1)/m S through
        B_intra, plus the relay's copy of its own blocks ((N-1)/N S/m at B_mem); then N-1
        messages of m S/n across the network:
          T = (m-1) alpha_intra + (m-1)/m S / B_intra + S/(m B_mem) + (N-1) alpha_net + (N-1)/N S / B_nic

Per-message cost is where 2dh wins: it sends N-1 network messages where flat sends (N-1) m, so
its gain is bounded by m (8x) when latency dominates, and it loses when bytes dominate (it moves
every byte once more inside the node). Tutel's published up to 20.7x at 2048 GPUs (MLSys 2023)
is beyond what message counts explain; the rest comes from what this model leaves out: flat
all-to-all at that scale keeps 2047 connections per GPU busy (NIC queue-pair and cache
pressure, congestion from incast) and runs messages of a few hundred bytes far below link
rate. Run with --alpha-net-us larger than the wire latency to see how such effects widen the gap.
"""
from __future__ import annotations

import argparse
import sys

KIB = 1024


def flat_us(n: int, m: int, size: float, p: argparse.Namespace) -> float:
    net = (n - m) * p.alpha_net_us + (n - m) / n * size / p.nic_bytes_per_us
    intra = (m - 1) * p.alpha_intra_us + (m - 1) / n * size / p.intra_bytes_per_us
    return max(net, intra)


def twodh_us(n: int, m: int, size: float, p: argparse.Namespace) -> float:
    nodes = n // m
    intra = (m - 1) * p.alpha_intra_us + (m - 1) / m * size / p.intra_bytes_per_us
    transform = (nodes - 1) / nodes * size / m / p.mem_bytes_per_us
    net = (nodes - 1) * p.alpha_net_us + (nodes - 1) / nodes * size / p.nic_bytes_per_us
    return intra + transform + net


def human(size: int) -> str:
    for unit, scale in (("MiB", KIB * KIB), ("KiB", KIB)):
        if size >= scale:
            return f"{size // scale}{unit}"
    return f"{size}B"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="256,512,1024,2048",
                        help="rank counts (default: 256,512,1024,2048)")
    parser.add_argument("--ranks-per-node", type=int, default=8, help="m (default 8)")
    parser.add_argument("--alpha-net-us", type=float, default=5.0,
                        help="cost of one message across the network on its sender, us "
                             "(default 5: an RDMA write with its completion and proxy step)")
    parser.add_argument("--alpha-intra-us", type=float, default=1.0,
                        help="cost of one message within a node, us (default 1)")
    parser.add_argument("--nic-gbps", type=float, default=200.0,
                        help="network bandwidth per rank, Gbit/s (default 200: one HDR NIC per "
                             "GPU, as in Tutel's A100 cluster)")
    parser.add_argument("--intra-gbytes", type=float, default=150.0,
                        help="bandwidth per rank within a node, GB/s (default 150: NVLink)")
    parser.add_argument("--mem-gbytes", type=float, default=1000.0,
                        help="local copy bandwidth, GB/s (default 1000: HBM)")
    parser.add_argument("--sizes", default="1K,4K,16K,64K,256K,1M,4M,16M,64M,256M,1024M",
                        help="bytes each rank sends (S), with K/M suffixes")
    args = parser.parse_args(argv)
    args.nic_bytes_per_us = args.nic_gbps * 1e9 / 8 / 1e6
    args.intra_bytes_per_us = args.intra_gbytes * 1e9 / 1e6
    args.mem_bytes_per_us = args.mem_gbytes * 1e9 / 1e6
    sizes = [int(s[:-1]) * {"K": KIB, "M": KIB * KIB}[s[-1]] if s[-1] in "KM" else int(s)
             for s in args.sizes.split(",")]
    m = args.ranks_per_node
    print(f"# analytic alpha-beta model: alpha_net {args.alpha_net_us} us, alpha_intra "
          f"{args.alpha_intra_us} us, NIC {args.nic_gbps} Gbit/s per rank, intra-node "
          f"{args.intra_gbytes} GB/s, copies {args.mem_gbytes} GB/s; {m} ranks per node")
    print(f"{'ranks':>6} {'nodes':>5} {'S/rank':>8} {'per peer':>9} {'flat us':>10} "
          f"{'2dh us':>10} {'speedup':>8}")
    best = {}
    for n in (int(x) for x in args.ranks.split(",")):
        if n % m:
            print(f"{n} ranks is not a multiple of {m} ranks per node", file=sys.stderr)
            return 2
        for size in sizes:
            flat, two = flat_us(n, m, size, args), twodh_us(n, m, size, args)
            best[n] = max(best.get(n, 0.0), flat / two)
            print(f"{n:>6} {n // m:>5} {human(size):>8} {size / n:>8.0f}B {flat:>10.1f} "
                  f"{two:>10.1f} {flat / two:>7.2f}x")
    print("# largest modelled speedup: " + ", ".join(f"{n} ranks {x:.1f}x" for n, x in best.items())
          + f" (bound: m = {m}x); Tutel reports up to 20.7x at 2048 GPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
