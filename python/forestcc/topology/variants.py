"""Variants of a topology: what a real cluster looks like next to its preset.

Real clusters are never perfectly uniform: one box has a slower NIC, one NVLink failed, a
generation is mixed in. These helpers make such a topology from a uniform one, so benchmarks and
tests can ask the generators the questions users with real clusters ask.

    slow = one_box_slower(preset("a100-fattree-1024"), box=0, part="nvlink", factor=Fraction(1, 2))
    worn = one_gpu_slower(preset("a100-fattree-1024"), "b3.gpu5", "nvlink", Fraction(11, 12))
"""
from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from .model import Link, Topology, TopologyError

__all__ = ["PARTS", "box_links", "gpu_links", "one_box_slower", "one_gpu_slower", "remove_links",
           "scale_links"]

# "nvlink": links with both ends in the box (its NVSwitch or xGMI fabric);
# "nic": links from a node of the box to a node outside every box (its network links).
PARTS = ("nvlink", "nic")


def box_links(topo: Topology, box: int, part: str) -> Callable[[Link], bool]:
    """A predicate selecting the links of `part` ("nvlink" or "nic") of box `box`."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    box_of = {n.id: n.box for n in topo.nodes}
    if box not in set(box_of.values()):
        raise TopologyError(f"{topo.name}: no box {box}")

    def inside(link: Link) -> bool:
        return box_of[link.src] == box and box_of[link.dst] == box

    def network(link: Link) -> bool:
        ends = (box_of[link.src], box_of[link.dst])
        return box in ends and None in ends

    return inside if part == "nvlink" else network


def gpu_links(topo: Topology, gpu: str, part: str) -> Callable[[Link], bool]:
    """A predicate selecting the links of `part` of the compute node `gpu`: "nvlink" its links
    within its box (a failed or degraded NVLink of one GPU), "nic" its links out of every box."""
    if gpu not in topo.index or not topo.node(gpu).is_compute or topo.node(gpu).box is None:
        raise TopologyError(f"{topo.name}: {gpu!r} is not a compute node in a box")
    in_box = box_links(topo, topo.node(gpu).box, part)
    return lambda link: gpu in (link.src, link.dst) and in_box(link)


def scale_links(topo: Topology, where: Callable[[Link], bool], factor: Fraction,
                name: str | None = None) -> Topology:
    """The topology with every link that `where` selects running at `factor` times its bandwidth."""
    factor = Fraction(factor)
    if factor <= 0:
        raise ValueError(f"factor must be positive, got {factor}")
    links = [Link(l.src, l.dst, l.bandwidth * factor, l.latency) if where(l) else l
             for l in topo.links]
    return Topology(name or topo.name, topo.nodes, links, topo.description)


def remove_links(topo: Topology, where: Callable[[Link], bool], name: str | None = None) -> Topology:
    """The topology without the links that `where` selects (a failed cable, a missing NIC)."""
    return Topology(name or topo.name, topo.nodes, [l for l in topo.links if not where(l)],
                    topo.description)


def one_box_slower(topo: Topology, box: int, part: str, factor: Fraction = Fraction(1, 2)) -> Topology:
    """`topo` with box `box`'s `part` links ("nvlink" or "nic") at `factor` of their bandwidth."""
    name = f"{topo.name}-box{box}-{part}x{factor}"
    return scale_links(topo, box_links(topo, box, part), factor, name=name)


def one_gpu_slower(topo: Topology, gpu: str, part: str, factor: Fraction = Fraction(1, 2)) -> Topology:
    """`topo` with the `part` links ("nvlink" or "nic") of compute node `gpu` at `factor` of
    their bandwidth (an NVSwitch box where some of one GPU's NVLinks failed, a slower NIC)."""
    name = f"{topo.name}-{gpu}-{part}x{factor}"
    return scale_links(topo, gpu_links(topo, gpu, part), factor, name=name)
