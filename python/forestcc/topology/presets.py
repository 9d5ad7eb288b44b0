"""Preset topologies; ``schedules/topologies/*.json`` are these functions' output.

The modelling choices (documented with numbers in ``schedules/topologies/README.md``):

* A box's NVSwitch fabric is one switch node: every GPU has one link each way at its full NVLink
  bandwidth. Several NVSwitch chips act as one non-blocking crossbar, so merging them loses no cut.
* A NIC is not a node: it is the GPU's link to its network switch, at the NIC's line rate.
* Latencies are rough per-hop figures (0.5 us NVLink/xGMI hop, 2.5 us network hop); only the
  simulator uses them, the throughput optimum does not.
* Parallel links (MI250's multiple xGMI links between two GCDs) are written as one link carrying
  their sum, which the model treats identically.
"""
from __future__ import annotations

from typing import Callable

from .model import COMPUTE, SWITCH, Link, Node, Topology, bidirectional

__all__ = [
    "MI250_XGMI_LINKS",
    "PRESETS",
    "a100_fat_tree",
    "dgx_a100",
    "dgx_h100",
    "mi250",
    "preset",
    "torus2d",
]

NVLINK_HOP_US = 0.5
NETWORK_HOP_US = 2.5

# Number of 50 GB/s xGMI links between GCD i and GCD j of one MI250 box (the ForestColl authors'
# model, symmetric, 7 links per GCD).
MI250_XGMI_LINKS = [
    [0, 4, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
    [4, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 0, 4, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 4, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0],
    [2, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 1, 0, 0, 4, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 1, 0, 1, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 2, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 2, 0, 0, 0],
    [0, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 1, 0, 0],
    [0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 1, 0],
    [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 2],
    [0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 1, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4, 0, 1, 1],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 4],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 4, 0],
]


def _nvswitch_boxes(boxes: int, gpus: int, nvlink_gbps: int, networked: bool):
    nodes: list[Node] = []
    links: list[Link] = []
    for b in range(boxes):
        nvswitch = f"b{b}.nvswitch"
        for g in range(gpus):
            nodes.append(Node(f"b{b}.gpu{g}", COMPUTE, rank=b * gpus + g, box=b,
                              rail=g if networked else None))
            links += bidirectional(f"b{b}.gpu{g}", nvswitch, nvlink_gbps, NVLINK_HOP_US)
        nodes.append(Node(nvswitch, SWITCH, box=b))
    return nodes, links


def dgx_a100(boxes: int) -> Topology:
    """DGX-A100 boxes: 8 GPUs on an NVSwitch at 300 GB/s per GPU per direction; with more than one
    box, one 25 GB/s NIC per GPU, rails 0,2,4,6 on switch ``ib.even`` and 1,3,5,7 on ``ib.odd``."""
    nodes, links = _nvswitch_boxes(boxes, 8, 300, boxes > 1)
    if boxes > 1:
        for parity in ("even", "odd"):
            nodes.append(Node(f"ib.{parity}", SWITCH))
        for b in range(boxes):
            for g in range(8):
                links += bidirectional(f"b{b}.gpu{g}", "ib." + ("even", "odd")[g % 2], 25,
                                       NETWORK_HOP_US)
    return Topology(f"dgx-a100x{boxes}", nodes, links,
                    f"{boxes} x DGX-A100 (8 A100, NVSwitch 300 GB/s per GPU"
                    + (", one 25 GB/s NIC per GPU, two IB switches by odd/even rail)" if boxes > 1 else ")"))


def dgx_h100(boxes: int) -> Topology:
    """DGX-H100 boxes: 8 GPUs on NVSwitch at 450 GB/s per GPU per direction; with more than one box,
    eight 50 GB/s NICs, rail-optimized: switch ``rail{g}`` joins GPU g of every box."""
    nodes, links = _nvswitch_boxes(boxes, 8, 450, boxes > 1)
    if boxes > 1:
        for g in range(8):
            nodes.append(Node(f"rail{g}", SWITCH, rail=g))
            for b in range(boxes):
                links += bidirectional(f"b{b}.gpu{g}", f"rail{g}", 50, NETWORK_HOP_US)
    return Topology(f"dgx-h100x{boxes}", nodes, links,
                    f"{boxes} x DGX-H100 (8 H100, NVSwitch 450 GB/s per GPU"
                    + (", eight 50 GB/s NICs, rail-optimized)" if boxes > 1 else ")"))


def mi250(boxes: int) -> Topology:
    """AMD MI250 boxes: 16 GCDs joined by 50 GB/s xGMI links (MI250_XGMI_LINKS); with more than one
    box, every GCD links to one network switch ``net`` at 16 GB/s each way."""
    nodes: list[Node] = []
    links: list[Link] = []
    for b in range(boxes):
        for i in range(16):
            nodes.append(Node(f"b{b}.gcd{i}", COMPUTE, rank=b * 16 + i, box=b,
                              rail=i if boxes > 1 else None))
        for i in range(16):
            for j in range(i + 1, 16):
                if MI250_XGMI_LINKS[i][j]:
                    links += bidirectional(f"b{b}.gcd{i}", f"b{b}.gcd{j}",
                                           50 * MI250_XGMI_LINKS[i][j], NVLINK_HOP_US)
    if boxes > 1:
        nodes.append(Node("net", SWITCH))
        for b in range(boxes):
            for i in range(16):
                links += bidirectional(f"b{b}.gcd{i}", "net", 16, NETWORK_HOP_US)
    return Topology(f"mi250x{boxes}", nodes, links,
                    f"{boxes} x AMD MI250 box (16 GCDs, xGMI mesh of 50 GB/s links"
                    + (", every GCD to one switch at 16 GB/s)" if boxes > 1 else ")"))


def torus2d(rows: int = 4, cols: int = 4, bandwidth: int = 100) -> Topology:
    """A rows x cols 2D torus of compute nodes, each linked to its four neighbours (wrapping)."""
    nodes = [Node(f"n{r}-{c}", COMPUTE, rank=r * cols + c) for r in range(rows) for c in range(cols)]
    links: list[Link] = []
    for r in range(rows):
        for c in range(cols):
            links += bidirectional(f"n{r}-{c}", f"n{r}-{(c + 1) % cols}", bandwidth, 1)
            links += bidirectional(f"n{r}-{c}", f"n{(r + 1) % rows}-{c}", bandwidth, 1)
    return Topology(f"torus-{rows}x{cols}", nodes, links,
                    f"{rows}x{cols} 2D torus, {bandwidth} GB/s per link per direction")


def a100_fat_tree(boxes: int = 128, boxes_per_unit: int = 16) -> Topology:
    """A rail-optimized fat tree of DGX-A100 boxes (1024 GPUs by default).

    Boxes form scalable units of ``boxes_per_unit``; each unit has one leaf switch per rail
    (``su{s}.leaf{g}``) taking the 25 GB/s NIC of GPU g of each of its boxes; each rail's leaves
    connect to that rail's spine group, modelled as one switch ``spine{g}``, with as much uplink as
    downlink (non-blocking). Merging a spine group's switches is exact for the cut bound: they have
    identical (proportional) links and no links among themselves, so an optimal cut never splits
    them. Cross-rail traffic goes over NVSwitch inside a box, as in rail-optimized clusters."""
    if boxes % boxes_per_unit:
        raise ValueError("boxes must be a multiple of boxes_per_unit")
    nodes, links = _nvswitch_boxes(boxes, 8, 300, True)
    units = boxes // boxes_per_unit
    for g in range(8):
        nodes.append(Node(f"spine{g}", SWITCH, rail=g))
    for s in range(units):
        for g in range(8):
            leaf = f"su{s}.leaf{g}"
            nodes.append(Node(leaf, SWITCH, rail=g))
            links += bidirectional(leaf, f"spine{g}", 25 * boxes_per_unit, NETWORK_HOP_US)
            for b in range(s * boxes_per_unit, (s + 1) * boxes_per_unit):
                links += bidirectional(f"b{b}.gpu{g}", leaf, 25, NETWORK_HOP_US)
    return Topology(f"a100-fattree-{boxes * 8}", nodes, links,
                    f"{boxes} DGX-A100 boxes ({boxes * 8} GPUs), rail-optimized two-level fat tree: "
                    f"{units} units of {boxes_per_unit} boxes, a leaf per unit and rail, "
                    "one aggregated non-blocking spine per rail")


PRESETS: dict[str, Callable[[], Topology]] = {
    **{f"dgx-a100x{b}": (lambda b=b: dgx_a100(b)) for b in (1, 2, 4, 8)},
    **{f"dgx-h100x{b}": (lambda b=b: dgx_h100(b)) for b in (1, 2, 4)},
    **{f"mi250x{b}": (lambda b=b: mi250(b)) for b in (1, 2, 4)},
    "torus-4x4": lambda: torus2d(4, 4),
    "a100-fattree-1024": lambda: a100_fat_tree(128, 16),
}


def preset(name: str) -> Topology:
    """The preset called ``name`` (see ``PRESETS``)."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise KeyError(f"no preset {name!r}; presets: {', '.join(PRESETS)}") from None
