"""Box rotation: a direct forest for many identical boxes, used where the generic packing is slow.

For topologies made of B boxes of m ranks each, every rank with a rail r in 0..m-1 and a network
joining equal rails of different boxes. The tree of the rank (box b0, rail r0):

1. the root sends to the other m-1 ranks of its box over the box's own fabric;
2. box b != b0 is entered once, by rail r = (r0 + b - b0) mod m, from rank (b0, r) over the network;
3. the entry rank forwards to the rest of box b over that box's fabric.

Every network link out of (b0, r) then carries B-1 tree entries, one per other box, and every
link into (b, r) B-1 as well: the all_gather traffic of the box cut spread evenly over all NICs.
That is exactly the bound when the box cut is the tight one, as in large rail-optimized clusters.
Boxes need not be identical. A box whose GPUs bind through their own fabric (half its NVLink, an
older generation, one GPU with failed NVLinks) needs more of the network than one entry per tree:
``box_entries`` decides, per such box, which trees enter it through extra rails and which entry
forwards to which GPU, from the exact cut bound; every other box keeps the plain rotation.

The forest is accepted only when the independent evaluation meets the cut bound, so the rotation is
a shortcut that uses the boxes' structure, never an approximation passed off as the optimum.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from functools import reduce

from ..topology.model import Topology

__all__ = ["BoxShape", "box_shape", "rotation_forest"]


def _routes_from(topo: Topology, adjacency: list[list[int]], start: int, may_pass) -> dict[int, tuple[int, ...]]:
    """Shortest paths from `start` to every compute node reachable through switches that
    `may_pass` accepts (compute nodes end a path; they never forward)."""
    parent = {start: -1}
    queue = deque([start])
    found: dict[int, tuple[int, ...]] = {}
    while queue:
        v = queue.popleft()
        for w in adjacency[v]:
            if w in parent:
                continue
            node = topo.nodes[w]
            if node.is_compute:
                parent[w] = v
                path = [w]
                while parent[path[-1]] != -1:
                    path.append(parent[path[-1]])
                found[w] = tuple(reversed(path))
            elif may_pass(node):
                parent[w] = v
                queue.append(w)
    return found


@dataclass
class BoxShape:
    """Boxes with one rank per rail, and the routes the construction may use."""

    box_ids: list[int]
    rails: list[int]
    members: dict[int, dict[int, int]]           # box -> rail -> node index
    inside: dict[int, dict[int, tuple[str, ...]]]   # node -> same-box node -> route
    network: dict[int, dict[int, tuple[str, ...]]]  # node -> other-box node -> route


def box_shape(topo: Topology) -> BoxShape | None:
    """The box/rail structure, or None when the topology does not have it: every rank names a
    box and a rail, every box has the same rails, and each rank reaches its box through the
    box's own switches."""
    boxes: dict[int, dict[int, int]] = {}
    for node in topo.compute:
        if node.box is None or node.rail is None:
            return None
        boxes.setdefault(node.box, {})[node.rail] = topo.index[node.id]
    rails = sorted(next(iter(boxes.values())))
    m = len(rails)
    if len(boxes) < 2 or any(sorted(b) != rails for b in boxes.values()):
        return None
    if m * len(boxes) != topo.num_ranks:
        return None  # two ranks of one box share a rail
    adjacency: list[list[int]] = [[] for _ in topo.nodes]
    for (s, d) in topo.capacities():
        adjacency[topo.index[s]].append(topo.index[d])
    for row in adjacency:
        row.sort()
    names = [n.id for n in topo.nodes]
    inside: dict[int, dict[int, tuple[str, ...]]] = {}
    network: dict[int, dict[int, tuple[str, ...]]] = {}
    for b, members in boxes.items():
        for v in members.values():
            local = _routes_from(topo, adjacency, v, lambda n, b=b: n.box == b)
            inside[v] = {w: tuple(names[x] for x in p) for w, p in local.items()
                         if topo.nodes[w].box == b}
            if len(inside[v]) != m - 1:
                return None
            remote = _routes_from(topo, adjacency, v, lambda n: n.box is None)
            network[v] = {w: tuple(names[x] for x in p) for w, p in remote.items()}
    return BoxShape(sorted(boxes), rails, boxes, inside, network)


def rotation_forest(topo: Topology, k: int | None):
    """(trees, k, natural_k, cut, evaluation, stats, method) if the construction applies and
    meets the bound, else None. method: "box-rotation" (one entry per box and tree) or
    "box-entries" (some boxes entered through several rails, ``box_entries``)."""
    from .box_entries import plan_entries
    from .forest import _graph_module, _integer_capacities, cut_ratio, evaluate_trees

    started = time.perf_counter()
    shape = box_shape(topo)
    if shape is None:
        return None
    shaped = time.perf_counter()
    src_i, dst_i, cap, _ = _integer_capacities(topo)
    compute = [n.is_compute for n in topo.nodes]
    _num, den, side = _graph_module().max_ratio_cut(len(topo.nodes), compute, src_i, dst_i, cap)
    g = reduce(math.gcd, cap, 0)
    natural_k = den // math.gcd(den, g)
    cut = tuple(topo.nodes[i].id for i in side)
    tau = cut_ratio(topo, cut)
    bounded = time.perf_counter()
    plan = plan_entries(topo, shape, tau, k or natural_k)
    if plan is None:
        return None
    k_used = (k or natural_k) if plan else (k or 1)
    trees = _assemble(topo, shape, plan, k_used)
    if trees is None:
        return None
    built = time.perf_counter()
    achieved = evaluate_trees(topo, trees, k_used)
    if achieved.time != tau:
        return None
    stats = {"seconds_shape": shaped - started, "seconds_bound": bounded - shaped,
             "seconds_construction": built - bounded, "seconds_check": time.perf_counter() - built,
             "boxes_with_extra_entries": len(plan)}
    return trees, k_used, natural_k, cut, achieved, stats, "box-entries" if plan else "box-rotation"


def _assemble(topo: Topology, shape: BoxShape, plan, k: int):
    """The trees: per root, the rotation's single entry into every box, except in the boxes of
    `plan`, where each of the root's k units enters and forwards as planned. Units of one root
    that the plan treats alike become one tree with their multiplicity."""
    from .forest import Tree

    rank = [n.rank for n in topo.nodes]
    m, count = len(shape.rails), len(shape.box_ids)
    position = {b: i for i, b in enumerate(shape.box_ids)}
    trees = []
    roots_in = {b: {root for root, _ in units} for b, units in plan.items()}
    for b0 in shape.box_ids:
        for r0_index, r0 in enumerate(shape.rails):
            root = shape.members[b0][r0]
            arcs: list[tuple[int, int]] = []
            routes: list[tuple[str, ...]] = []
            for w, route in shape.inside[root].items():
                arcs.append((rank[root], rank[w]))
                routes.append(route)
            planned = []  # (box, rotation rail) where the plan decides some of root's units
            for shift in range(1, count):
                b = shape.box_ids[(position[b0] + shift) % count]
                entry = shape.rails[(r0_index + shift) % m]
                if root in roots_in.get(b, ()):
                    planned.append((b, entry))
                elif not _enter(shape, rank, arcs, routes, b0, b, (entry,), {}):
                    return None
            variants: dict[tuple, int] = {}
            for u in range(k):
                key = tuple((b, *_planned_entry(plan[b], root, u, entry)) for b, entry in planned)
                variants[key] = variants.get(key, 0) + 1
            for key, multiplicity in variants.items():
                tree_arcs, tree_routes = list(arcs), list(routes)
                for b, entries, forwards in key:
                    if not _enter(shape, rank, tree_arcs, tree_routes, b0, b, entries, dict(forwards)):
                        return None
                trees.append(Tree(rank[root], multiplicity, tuple(tree_arcs), tuple(tree_routes)))
    return trees


def _planned_entry(units, root: int, u: int, rotation_rail: int):
    """(entry rails, sorted (target rail, forwarding rail) pairs) of unit u of `root` into a box:
    as planned, or the rotation's single rail where the plan leaves the unit alone."""
    chosen = units.get((root, u))
    if chosen is not None:
        return chosen[0], tuple(sorted(chosen[1].items()))
    return (rotation_rail,), ()


def _enter(shape: BoxShape, rank, arcs, routes, b0: int, b: int, entries, forwards) -> bool:
    """Arcs of one tree into box b: over the network from box b0 into each entry rail, then over
    b's fabric from an entry to every other rank of b (`forwards`: target rail -> entry rail;
    a target not named takes the first entry)."""
    for rail in entries:
        src, dst = shape.members[b0][rail], shape.members[b][rail]
        route = shape.network[src].get(dst)
        if route is None:
            return False
        arcs.append((rank[src], rank[dst]))
        routes.append(route)
    for rail in shape.rails:
        if rail in entries:
            continue
        via = shape.members[b][forwards.get(rail, entries[0])]
        target = shape.members[b][rail]
        arcs.append((rank[via], rank[target]))
        routes.append(shape.inside[via][target])
    return True
