"""The topology model: compute and switch nodes joined by directed links.

A compute node is a rank (a GPU, a GCD, a CPU process); a switch only forwards (NVSwitch, an
InfiniBand or Ethernet switch). Links are directed and carry a bandwidth in GB/s and a latency in
microseconds; parallel links between the same pair add up. Bandwidths are exact rationals
(``fractions.Fraction``) so that schedule generators can prove optimality without rounding.

Nodes may name the *box* they sit in (a server) and the *rail* they belong to (the index of the
NIC within its box, which rail-optimized networks connect to the same leaf switch).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["COMPUTE", "SWITCH", "Link", "Node", "Topology", "TopologyError"]

COMPUTE = "compute"
SWITCH = "switch"


class TopologyError(ValueError):
    """A topology that is malformed or cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class Node:
    """One node. ``rank`` is set exactly for compute nodes (0..N-1)."""

    id: str
    kind: str
    rank: int | None = None
    box: int | None = None
    rail: int | None = None

    @property
    def is_compute(self) -> bool:
        return self.kind == COMPUTE


@dataclass(frozen=True)
class Link:
    """A directed link; ``bandwidth`` in GB/s, ``latency`` in microseconds."""

    src: str
    dst: str
    bandwidth: Fraction
    latency: Fraction = Fraction(0)


def _fraction_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


class Topology:
    """An immutable topology. Construction validates it (``TopologyError`` names the bad field)."""

    def __init__(self, name: str, nodes: Sequence[Node], links: Sequence[Link],
                 description: str = "", where: str = "topology"):
        self.name = name
        self.description = description
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.links: tuple[Link, ...] = tuple(links)
        self.index: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            field = f"{where}: nodes[{i}]"
            if not isinstance(node.id, str) or not node.id:
                raise TopologyError(f"{field}.id: expected a non-empty string, got {node.id!r}")
            if node.id in self.index:
                raise TopologyError(f"{field}.id: duplicate node id {node.id!r}")
            if node.kind not in (COMPUTE, SWITCH):
                raise TopologyError(f"{field}.kind: expected 'compute' or 'switch', got {node.kind!r}")
            if node.kind == COMPUTE and not isinstance(node.rank, int):
                raise TopologyError(f"{field}.rank: a compute node needs an integer rank")
            if node.kind == SWITCH and node.rank is not None:
                raise TopologyError(f"{field}.rank: a switch has no rank (got {node.rank!r})")
            for attr in ("box", "rail"):
                value = getattr(node, attr)
                if value is not None and (not isinstance(value, int) or value < 0):
                    raise TopologyError(f"{field}.{attr}: expected a non-negative integer or null, "
                                        f"got {value!r}")
            self.index[node.id] = i
        ranks = sorted(n.rank for n in self.nodes if n.is_compute)
        if ranks != list(range(len(ranks))):
            raise TopologyError(f"{where}: compute ranks must be 0..{len(ranks) - 1} exactly once each")
        self.compute: tuple[Node, ...] = tuple(sorted((n for n in self.nodes if n.is_compute),
                                                     key=lambda n: n.rank))
        for i, link in enumerate(self.links):
            field = f"{where}: links[{i}]"
            for end in ("src", "dst"):
                if getattr(link, end) not in self.index:
                    raise TopologyError(f"{field}.{end}: unknown node {getattr(link, end)!r}")
            if link.src == link.dst:
                raise TopologyError(f"{field}: a link from {link.src!r} to itself")
            if not isinstance(link.bandwidth, Fraction) or link.bandwidth <= 0:
                raise TopologyError(f"{field}.bandwidth: expected a positive number, got {link.bandwidth!r}")
            if not isinstance(link.latency, Fraction) or link.latency < 0:
                raise TopologyError(f"{field}.latency: expected a non-negative number, got {link.latency!r}")

    # ---- views -------------------------------------------------------------------------------
    @property
    def num_ranks(self) -> int:
        return len(self.compute)

    @property
    def switches(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if not n.is_compute)

    def node(self, node_id: str) -> Node:
        return self.nodes[self.index[node_id]]

    def rank_of(self, node_id: str) -> int:
        rank = self.node(node_id).rank
        if rank is None:
            raise TopologyError(f"{self.name}: {node_id!r} is a switch, not a rank")
        return rank

    def boxes(self) -> dict[int, list[Node]]:
        """Box number -> its nodes (compute first, by rank)."""
        out: dict[int, list[Node]] = {}
        for node in sorted(self.nodes, key=lambda n: (not n.is_compute, n.rank or 0)):
            if node.box is not None:
                out.setdefault(node.box, []).append(node)
        return dict(sorted(out.items()))

    def rails(self) -> dict[int, list[Node]]:
        """Rail number -> its compute nodes."""
        out: dict[int, list[Node]] = {}
        for node in self.compute:
            if node.rail is not None:
                out.setdefault(node.rail, []).append(node)
        return dict(sorted(out.items()))

    def capacities(self) -> dict[tuple[str, str], Fraction]:
        """(src, dst) -> total bandwidth in GB/s, parallel links added up."""
        out: dict[tuple[str, str], Fraction] = {}
        for link in self.links:
            key = (link.src, link.dst)
            out[key] = out.get(key, Fraction(0)) + link.bandwidth
        return out

    def bandwidth_in(self, node_id: str) -> Fraction:
        return sum((l.bandwidth for l in self.links if l.dst == node_id), Fraction(0))

    def bandwidth_out(self, node_id: str) -> Fraction:
        return sum((l.bandwidth for l in self.links if l.src == node_id), Fraction(0))

    def reversed(self) -> Topology:
        """The same nodes with every link turned around (reduce_scatter runs on this graph)."""
        links = [Link(l.dst, l.src, l.bandwidth, l.latency) for l in self.links]
        return Topology(self.name + " (reversed)", self.nodes, links, self.description)

    def is_symmetric(self) -> bool:
        """True when every pair has the same bandwidth in both directions."""
        caps = self.capacities()
        return all(caps.get((b, a)) == c for (a, b), c in caps.items())

    # ---- identity --------------------------------------------------------------------------------
    def canonical(self) -> dict:
        """Content that defines the topology: nodes by id, directed links merged, exact numbers."""
        nodes = sorted([n.id, n.kind, n.rank, n.box, n.rail] for n in self.nodes)
        merged: dict[tuple[str, str], list[Fraction]] = {}
        for link in self.links:
            entry = merged.setdefault((link.src, link.dst), [Fraction(0), link.latency])
            entry[0] += link.bandwidth
            entry[1] = min(entry[1], link.latency)
        links = [[s, d, _fraction_text(bw), _fraction_text(lat)]
                 for (s, d), (bw, lat) in sorted(merged.items())]
        return {"nodes": nodes, "links": links}

    def fingerprint(self) -> str:
        """sha256 of the canonical content (names and descriptions do not count)."""
        text = json.dumps(self.canonical(), separators=(",", ":"), sort_keys=True)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    def __repr__(self) -> str:
        return (f"Topology({self.name!r}, {self.num_ranks} compute, {len(self.switches)} switches, "
                f"{len(self.links)} links)")


def bidirectional(src: str, dst: str, bandwidth, latency=0) -> list[Link]:
    """Two directed links with the same bandwidth and latency (a full-duplex cable)."""
    bw, lat = Fraction(bandwidth), Fraction(latency)
    return [Link(src, dst, bw, lat), Link(dst, src, bw, lat)]


def links_from_pairs(pairs: Iterable[tuple[str, str, object, object]]) -> list[Link]:
    out: list[Link] = []
    for src, dst, bw, lat in pairs:
        out.extend(bidirectional(src, dst, bw, lat))
    return out
