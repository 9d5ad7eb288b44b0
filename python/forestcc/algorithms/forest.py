"""ForestColl: throughput-optimal spanning-tree forests for any topology (Zhao et al., 2024).

all_gather: every rank's shard is broadcast down trees rooted at that rank; the root's k trees each
carry 1/k of it (a tree of multiplicity m carries m/k). reduce_scatter runs trees of the reversed
topology backwards; all_reduce is reduce_scatter then all_gather on the same trees.

Times are expressed per byte of one rank's shard: a collective on shards of s GB takes s·τ seconds,
τ in s/GB, and its algorithm bandwidth (nccl-tests' algbw: whole buffer / time) is N/τ GB/s.

Two numbers are printed for every forest, both exact Fractions:
* the *bound*: τ* = |S ∩ Vc| / B+(S) for the tight cut S the generator returns, recomputed here
  from the topology's links (any cut gives a valid lower bound on τ);
* the *achieved* τ: the largest (load / bandwidth) over physical links, recomputed here from the
  trees' routes by ``evaluate_trees``, independently of the generator.
Equal numbers prove the forest optimal.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import reduce

from ..topology.model import Topology, TopologyError

__all__ = [
    "COLLECTIVES",
    "Evaluation",
    "Forest",
    "Tree",
    "cut_ratio",
    "evaluate_trees",
    "generate_forest",
    "throughput_bound",
]

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")


@dataclass(frozen=True)
class Tree:
    """One spanning tree. ``arcs`` are (parent rank, child rank), parents before children;
    ``routes[i]`` is the physical node path that arc i's data takes, in the direction it flows
    during all_gather (parent ... child; for reduce_scatter forests child ... parent)."""

    root: int
    multiplicity: int
    arcs: tuple[tuple[int, int], ...]
    routes: tuple[tuple[str, ...], ...]


@dataclass
class Evaluation:
    time: Fraction                          # τ, seconds per GB of shard
    loads: dict[tuple[str, str], Fraction]  # shards (of one rank) crossing each link, summed
    bottleneck: tuple[str, str]


@dataclass
class Forest:
    topology: Topology
    collective: str
    k: int                      # trees per root, counted with multiplicity
    natural_k: int              # smallest k that reaches the bound exactly
    trees: list[Tree]
    bound_time: Fraction        # τ* from the cut below
    bound_cut: tuple[str, ...]  # node ids of S
    achieved: Evaluation
    method: str
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def achieved_time(self) -> Fraction:
        return self.achieved.time

    @property
    def bound_algbw(self) -> Fraction:
        return self.topology.num_ranks / self.bound_time

    @property
    def achieved_algbw(self) -> Fraction:
        return self.topology.num_ranks / self.achieved.time

    @property
    def loss(self) -> Fraction:
        """Fraction of the optimal throughput given up (0 when optimal)."""
        return 1 - self.bound_time / self.achieved.time

    @property
    def optimal(self) -> bool:
        return self.achieved.time == self.bound_time

    def report(self) -> str:
        topo = self.topology
        inside = set(self.bound_cut)
        outside = [n.id for n in topo.compute if n.id not in inside]
        cut = (f"{topo.num_ranks - len(outside)} ranks | {len(outside)} ranks "
               f"({', '.join(outside[:3])}{', ...' if len(outside) > 3 else ''})")
        a, b = self.achieved.bottleneck
        lines = [
            (f"forest     {topo.name} {self.collective}: {len(self.trees)} trees, k={self.k} per root "
            f"(natural k={self.natural_k}), method {self.method}"),
            (f"bound      {float(self.bound_algbw):10.2f} GB/s algbw  = {self.bound_algbw} exactly"
            f"   (cut {cut})"),
            (f"achieved   {float(self.achieved_algbw):10.2f} GB/s algbw  = {self.achieved_algbw} exactly"
            f"   (from link loads; bottleneck {a} -> {b})"),
        ]
        if self.optimal:
            lines.append("optimal    yes: achieved == bound as rationals")
        else:
            lines.append(f"loss       {float(self.loss) * 100:.3f}% of the optimum (= {self.loss})")
        return "\n".join(lines)


# ---- bound ---------------------------------------------------------------------------------------
def _integer_capacities(topo: Topology):
    """Merged arcs as node indices with integer capacities, and the GB/s of one capacity unit."""
    caps = topo.capacities()
    scale = reduce(math.lcm, (c.denominator for c in caps.values()), 1)
    ints = [int(c * scale) for c in caps.values()]
    g = reduce(math.gcd, ints, 0) or 1
    src = [topo.index[s] for s, _ in caps]
    dst = [topo.index[d] for _, d in caps]
    return src, dst, [c // g for c in ints], Fraction(g, scale)


def _graph_module():
    try:
        from .. import _graph
    except ImportError as err:
        raise ImportError("forestcc._graph (the C++ graph core) is not built; build it with "
                          "`cmake --build <build> --target _graph`") from err
    return _graph


def cut_ratio(topo: Topology, cut: Iterable[str]) -> Fraction:
    """|S ∩ Vc| / B+(S) in s/GB for the node set S: a lower bound on all_gather's τ."""
    inside = set(cut)
    ranks = sum(1 for n in topo.compute if n.id in inside)
    leaving = sum((l.bandwidth for l in topo.links if l.src in inside and l.dst not in inside),
                  Fraction(0))
    if ranks == 0 or ranks == topo.num_ranks:
        raise ValueError("a cut must leave ranks on both sides")
    if leaving == 0:
        raise TopologyError(f"{topo.name}: nothing leaves the cut; the topology is not connected")
    return Fraction(ranks) / leaving


def throughput_bound(topo: Topology, collective: str = "all_gather") -> tuple[Fraction, tuple[str, ...]]:
    """(optimal algbw in GB/s, tight cut) for the collective, exactly."""
    _check_collective(topo, collective)
    graph = topo.reversed() if collective == "reduce_scatter" else topo
    src, dst, cap, _ = _integer_capacities(graph)
    compute = [n.is_compute for n in graph.nodes]
    _, _, side = _graph_module().max_ratio_cut(len(graph.nodes), compute, src, dst, cap)
    cut = tuple(graph.nodes[i].id for i in side)
    tau = cut_ratio(graph, cut) * (2 if collective == "all_reduce" else 1)
    return topo.num_ranks / tau, cut


def _check_collective(topo: Topology, collective: str) -> None:
    if collective not in COLLECTIVES:
        raise ValueError(f"forest: collective must be one of {COLLECTIVES}, got {collective!r}")
    if topo.num_ranks < 2:
        raise TopologyError(f"{topo.name}: a collective needs at least 2 ranks")
    if collective == "all_reduce" and not topo.is_symmetric():
        raise TopologyError(f"{topo.name}: all_reduce forests run reduce_scatter and all_gather "
                            "on the same trees, which needs equal bandwidth in both directions")


def _check_switches_balanced(topo: Topology) -> None:
    """Forests route through switches by edge splitting, which pairs every unit entering a switch
    with a unit leaving it (a switch forwards, it neither stores nor replicates). A switch that
    receives more than it sends (or less) has no such pairing, so the generator refuses it as input
    instead of failing halfway; the cut bound (throughput_bound) stays valid for it."""
    into: dict[str, Fraction] = {}
    out: dict[str, Fraction] = {}
    for link in topo.links:
        out[link.src] = out.get(link.src, Fraction(0)) + link.bandwidth
        into[link.dst] = into.get(link.dst, Fraction(0)) + link.bandwidth
    for node in topo.switches:
        a, b = into.get(node.id, Fraction(0)), out.get(node.id, Fraction(0))
        if a != b:
            raise TopologyError(
                f"{topo.name}: switch {node.id!r} receives {_gbps(a)} GB/s but sends {_gbps(b)} GB/s; "
                "forests need every switch to send as much as it receives (balanced switches: "
                "give each of its links the same bandwidth both ways, or fix the one that differs)")


def _gbps(value: Fraction) -> str:
    return str(value) if value.denominator == 1 else f"{float(value):g} (= {value})"


# ---- evaluation (independent of the generator) ---------------------------------------------------
def evaluate_trees(topo: Topology, trees: Sequence[Tree], k: int,
                   collective: str = "all_gather") -> Evaluation:
    """Checks that every tree spans all ranks along real links, that each root's trees add up to k,
    and returns τ = max over links of (shards crossing it) / bandwidth, from the routes alone."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}")
    n = topo.num_ranks
    ids = [node.id for node in topo.compute]
    per_root = Counter()
    route_use: Counter = Counter()
    for t_index, tree in enumerate(trees):
        where = f"tree {t_index} (root {tree.root})"
        if not 0 <= tree.root < n or tree.multiplicity <= 0:
            raise ValueError(f"{where}: bad root or multiplicity")
        per_root[tree.root] += tree.multiplicity
        if len(tree.arcs) != n - 1 or len(tree.routes) != n - 1:
            raise ValueError(f"{where}: a spanning tree on {n} ranks has {n - 1} arcs, "
                             f"got {len(tree.arcs)}")
        reached = {tree.root}
        for (parent, child), route in zip(tree.arcs, tree.routes):
            if parent not in reached or child in reached:
                raise ValueError(f"{where}: arc {parent}->{child} is not a tree arc in order")
            reached.add(child)
            ends = (ids[parent], ids[child]) if collective != "reduce_scatter" else (ids[child], ids[parent])
            if (route[0], route[-1]) != ends:
                raise ValueError(f"{where}: route {route} does not join {ends[0]} to {ends[1]}")
            route_use[route] += tree.multiplicity
    missing = [r for r in range(n) if per_root[r] != k]
    if missing:
        raise ValueError(f"ranks {missing[:5]} do not have k={k} trees (with multiplicity)")
    caps = topo.capacities()
    loads: Counter = Counter()
    for route, uses in route_use.items():
        for hop in zip(route, route[1:]):
            loads[hop] += uses
        for middle in route[1:-1]:
            if topo.node(middle).is_compute:
                raise ValueError(f"route {route} passes through rank {middle}: only switches forward")
    phases = [loads]
    if collective == "all_reduce":  # the reduce_scatter phase runs every route backwards
        phases.append(Counter({(b, a): v for (a, b), v in loads.items()}))
    time = Fraction(0)
    bottleneck = ("", "")
    all_loads: dict[tuple[str, str], Fraction] = {}
    for phase in phases:
        worst = Fraction(0)
        for hop, used in phase.items():
            cap = caps.get(hop)
            if cap is None:
                raise ValueError(f"a route uses {hop[0]} -> {hop[1]}, which is not a link")
            ratio = Fraction(used, k) / cap
            all_loads[hop] = all_loads.get(hop, Fraction(0)) + Fraction(used, k)
            if ratio > worst:
                worst, bottleneck = ratio, hop
        time += worst
    return Evaluation(time, all_loads, bottleneck)


# ---- generation ----------------------------------------------------------------------------------
def generate_forest(topo: Topology, collective: str = "all_gather", k: int | None = None,
                    method: str = "auto") -> Forest:
    """ForestColl forest for ``collective`` on ``topo``.

    k: trees per root (counted with multiplicity). None picks the smallest k at which the optimum is
    reached exactly; a smaller k costs throughput, reported as ``Forest.loss``.
    method: "generic" (cut bound, switch removal, Edmonds packing: any topology with balanced
    switches), "box-rotation" (a direct construction for boxes with one rank per rail, entering a
    box through several rails where its fabric binds: ``Forest.method`` then says "box-entries";
    accepted only when the independent evaluation meets the bound), or "auto": box-rotation first
    wherever the topology has that shape (whatever its size: when it applies it is optimal and
    orders of magnitude faster), the generic path when it does not apply or does not reach the
    bound.
    """
    _check_collective(topo, collective)
    _check_switches_balanced(topo)
    if k is not None and (not isinstance(k, int) or k <= 0):
        raise ValueError(f"forest: k must be a positive integer, got {k!r}")
    if method not in ("auto", "generic", "box-rotation"):
        raise ValueError(f"forest: unknown method {method!r}")
    graph = topo.reversed() if collective == "reduce_scatter" else topo
    factor = 2 if collective == "all_reduce" else 1
    if method in ("box-rotation", "auto"):
        from .box_rotation import rotation_forest
        forest = rotation_forest(graph, k)
        if forest is not None:
            trees, k_used, natural_k, cut, achieved, stats, used = forest
            if collective != "all_gather":  # routes were built on `graph`; evaluate as the user runs them
                if collective == "reduce_scatter":
                    trees = [Tree(t.root, t.multiplicity, t.arcs, tuple(r[::-1] for r in t.routes))
                             for t in trees]
                achieved = None
            return _finish(topo, graph, collective, trees, k_used, natural_k, cut, used,
                           stats, factor, achieved)
        if method == "box-rotation":
            raise TopologyError(f"{topo.name}: box rotation (with or without extra entries) needs "
                                "boxes with the same rails, one rank per rail, each box joined by "
                                "its own switches, and did not reach the cut bound here")
    return _generic_forest(topo, graph, collective, k, factor)


def _generic_forest(topo: Topology, graph: Topology, collective: str, k: int | None, factor: int,
                    batch_switches: bool = True, pack_by_node: bool | None = None) -> Forest:
    """The generic path in C++ (`cpp/src/graph/`). batch_switches=False isolates every switch pair
    by pair, each split checked alone (the reference the batched plans are tested against);
    pack_by_node: True grows the trees node by node, False arc by arc, None node by node from 128
    ranks on (`tree_packing.cpp`)."""
    src, dst, cap, _ = _integer_capacities(graph)
    compute = [n.is_compute for n in graph.nodes]
    by_node = -1 if pack_by_node is None else int(pack_by_node)
    result = _graph_module().generate_forest(len(graph.nodes), compute, src, dst, cap, k or 0,
                                             batch_switches, by_node)
    names = [n.id for n in graph.nodes]
    routes = [tuple(names[v] for v in path) for path in result["paths"]]
    rank = [n.rank for n in graph.nodes]
    trees = []
    for root, mult, arcs, paths in result["trees"]:
        tree_routes = tuple(routes[p] for p in paths)
        if collective == "reduce_scatter":  # physical data flow is child -> parent
            tree_routes = tuple(r[::-1] for r in tree_routes)
        trees.append(Tree(rank[root], mult, tuple((rank[a], rank[b]) for a, b in arcs), tree_routes))
    cut = tuple(names[i] for i in result["cut"])
    return _finish(topo, graph, collective, trees, result["k"], result["natural_k"], cut, "generic",
                   dict(result["stats"]), factor)


def _finish(topo, graph, collective, trees, k, natural_k, cut, method, stats, factor,
            achieved: Evaluation | None = None) -> Forest:
    bound = cut_ratio(graph, cut) * factor
    if achieved is None:
        achieved = evaluate_trees(topo, trees, k, collective)
    return Forest(topo, collective, k, natural_k, trees, bound, cut, achieved, method, stats)
