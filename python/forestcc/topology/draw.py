"""``forestcc topo draw``: a picture of a topology (needs matplotlib).

Boxes are laid out on a grid, each box's compute nodes on a circle around its switches; switches
outside boxes sit in a row above, ordered by rail. Line width grows with bandwidth.
"""
from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

from .model import Topology, TopologyError

__all__ = ["draw", "layout"]


def layout(topo: Topology) -> dict[str, tuple[float, float]]:
    pos: dict[str, tuple[float, float]] = {}
    boxes = topo.boxes()
    if boxes:
        cols = math.ceil(math.sqrt(len(boxes)))
        for slot, (box, members) in enumerate(boxes.items()):
            cx, cy = (slot % cols) * 3.0, -(slot // cols) * 3.0
            compute = [n for n in members if n.is_compute]
            inner = [n for n in members if not n.is_compute]
            for i, n in enumerate(compute):
                angle = 2 * math.pi * i / max(1, len(compute)) + math.pi / 2
                pos[n.id] = (cx + math.cos(angle), cy + math.sin(angle))
            for i, n in enumerate(inner):
                pos[n.id] = (cx + 0.3 * (i - (len(inner) - 1) / 2), cy)
        width = max(1, cols - 1) * 3.0
        top = 2.0
    else:
        loose = [n for n in topo.compute]
        side = math.ceil(math.sqrt(len(loose)))
        for i, n in enumerate(loose):
            pos[n.id] = ((i % side) * 1.5, -(i // side) * 1.5)
        width, top = max(1, side - 1) * 1.5, 1.5
    leftover = [n for n in topo.nodes if n.id not in pos]
    leftover.sort(key=lambda n: (n.rail if n.rail is not None else -1, n.id))
    for i, n in enumerate(leftover):
        row = i // 32
        x = width * ((i % 32) + 0.5) / min(32, len(leftover)) if leftover else 0
        pos[n.id] = (x, top + 1.5 * (row + 1))
    return pos


def draw(topo: Topology, path: str, title: str = "") -> None:
    """Writes a PNG (or any format matplotlib knows from the file name)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.collections import LineCollection
    except ImportError:
        raise TopologyError("forestcc topo draw needs matplotlib: pip install matplotlib") from None
    pos = layout(topo)
    pairs: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    for link in topo.links:  # one line per node pair; width from the larger direction
        key = tuple(sorted((link.src, link.dst)))
        pairs[key] = max(pairs[key], link.bandwidth)
    top = max(pairs.values()) if pairs else Fraction(1)
    segments = [(pos[a], pos[b]) for a, b in pairs]
    widths = [0.3 + 2.5 * math.sqrt(float(bw / top)) for bw in pairs.values()]
    size = min(40, 6 + 0.02 * len(topo.nodes))
    fig, ax = plt.subplots(figsize=(size, size * 0.75))
    ax.add_collection(LineCollection(segments, linewidths=widths, colors="#7a8ca3", alpha=0.6, zorder=1))
    for kind, colour, marker in (("compute", "#2a9d8f", "o"), ("switch", "#e76f51", "s")):
        pts = [pos[n.id] for n in topo.nodes if n.kind == kind]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], c=colour, marker=marker,
                       s=max(6, 120 - 0.1 * len(topo.nodes)), zorder=2, label=kind)
    if len(topo.nodes) <= 80:
        for n in topo.nodes:
            ax.annotate(n.id, pos[n.id], fontsize=6, ha="center", va="bottom", zorder=3)
    ax.set_title(title or f"{topo.name}: {topo.num_ranks} compute, {len(topo.switches)} switches")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_aspect("equal")
    ax.autoscale()
    ax.axis("off")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
