"""``forestcc topo show``: a short text summary of a topology."""
from __future__ import annotations

from collections import Counter, defaultdict
from fractions import Fraction

from .model import Topology

__all__ = ["format_gbps", "summary"]


def format_gbps(value: Fraction) -> str:
    """Exact when integral, else two decimals (the exact fraction is printed where it matters)."""
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.2f}"


def summary(topo: Topology, bound: tuple[Fraction, list[str]] | None = None) -> str:
    """Counts, per-node bandwidth, boxes and rails; with ``bound`` = (all_gather algbw bound,
    cut node ids) also the throughput optimum."""
    bw_in: dict[str, Fraction] = defaultdict(Fraction)
    bw_out: dict[str, Fraction] = defaultdict(Fraction)
    degree: Counter = Counter()
    for link in topo.links:
        bw_out[link.src] += link.bandwidth
        bw_in[link.dst] += link.bandwidth
        degree[link.src] += 1
    switches = topo.switches
    lines = [f"{topo.name}: {topo.description}" if topo.description else topo.name,
             f"  fingerprint  {topo.fingerprint()}",
             f"  nodes        {topo.num_ranks} compute, {len(switches)} switch",
             (f"  links        {len(topo.links)} directed, "
             f"{format_gbps(sum((l.bandwidth for l in topo.links), Fraction(0)))} GB/s in total, "
             f"symmetric: {'yes' if topo.is_symmetric() else 'no'}")]
    boxes = topo.boxes()
    if boxes:
        shapes = Counter((sum(n.is_compute for n in members), sum(not n.is_compute for n in members))
                         for members in boxes.values())
        text = ", ".join(f"{count} x ({c} compute + {s} switch)" for (c, s), count in sorted(shapes.items()))
        lines.append(f"  boxes        {len(boxes)}: {text}")
    rails = topo.rails()
    if rails:
        sizes = Counter(len(m) for m in rails.values())
        lines.append(f"  rails        {len(rails)}: " +
                     ", ".join(f"{count} x {size} compute" for size, count in sorted(sizes.items())))
    lines.append("  compute nodes by bandwidth (GB/s):   in     out  links  count")
    groups = Counter((bw_in[n.id], bw_out[n.id], degree[n.id]) for n in topo.compute)
    for (i, o, d), count in sorted(groups.items()):
        lines.append(f"  {'':36}{format_gbps(i):>4}  {format_gbps(o):>6}  {d:>5}  {count:>5}")
    if switches:
        lines.append("  switches by bandwidth (GB/s):        in     out  links  count  e.g.")
        groups_s: dict[tuple, list[str]] = defaultdict(list)
        for n in switches:
            groups_s[(bw_in[n.id], bw_out[n.id], degree[n.id])].append(n.id)
        for (i, o, d), ids in sorted(groups_s.items()):
            lines.append(f"  {'':36}{format_gbps(i):>4}  {format_gbps(o):>6}  {d:>5}  "
                         f"{len(ids):>5}  {ids[0]}")
    isolated = [n.id for n in topo.compute if not bw_in[n.id] or not bw_out[n.id]]
    if isolated:
        lines.append(f"  warning: compute nodes without links in or out: {', '.join(isolated[:8])}")
    if bound is not None:
        algbw, cut = bound
        lines.append(f"  all_gather bound  {format_gbps(algbw)} GB/s algbw (= {algbw} exactly); "
                     f"tight cut: {_describe_cut(topo, cut)}")
    return "\n".join(lines)


def _describe_cut(topo: Topology, cut: list[str]) -> str:
    inside = set(cut)
    outside = [n.id for n in topo.compute if n.id not in inside]
    n_in = topo.num_ranks - len(outside)
    shown = ", ".join(outside[:4]) + (", ..." if len(outside) > 4 else "")
    return f"{n_in} ranks on one side, {len(outside)} on the other ({shown})"
