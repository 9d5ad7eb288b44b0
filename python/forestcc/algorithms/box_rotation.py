"""Box rotation: a direct forest for many identical boxes, used where the generic packing is slow.

For topologies made of B boxes of m ranks each, every rank with a rail r in 0..m-1 and a network
joining equal rails of different boxes. The tree of the rank (box b0, rail r0):

1. the root sends to the other m-1 ranks of its box over the box's own fabric;
2. box b != b0 is entered once, by rail r = (r0 + b - b0) mod m, from rank (b0, r) over the network;
3. the entry rank forwards to the rest of box b over that box's fabric.

Every network link out of (b0, r) then carries B-1 tree entries, one per other box, and every
link into (b, r) B-1 as well: the all_gather traffic of the box cut spread evenly over all NICs.
That is exactly the bound when the box cut is the tight one, as in large rail-optimized clusters.
The forest is accepted only when the independent evaluation meets the cut bound, so the rotation is
a shortcut that uses the boxes' symmetry, never an approximation passed off as the optimum.
"""
from __future__ import annotations

import math
import time
from collections import deque
from functools import reduce

from ..topology.model import Topology

__all__ = ["rotation_forest"]


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


def rotation_forest(topo: Topology, k: int | None):
    """(trees, k, natural_k, cut, evaluation, stats) if the construction applies and meets the
    bound, else None."""
    from .forest import Tree, _graph_module, _integer_capacities, cut_ratio, evaluate_trees

    started = time.perf_counter()
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
    rank = [n.rank for n in topo.nodes]
    box_ids = sorted(boxes)
    position = {b: i for i, b in enumerate(box_ids)}
    inside: dict[int, dict[int, tuple[str, ...]]] = {}   # rank node -> same-box target -> route
    network: dict[int, dict[int, tuple[str, ...]]] = {}  # rank node -> same-rail target -> route
    for b, members in boxes.items():
        for v in members.values():
            local = _routes_from(topo, adjacency, v, lambda n, b=b: n.box == b)
            inside[v] = {w: tuple(names[x] for x in p) for w, p in local.items()
                         if topo.nodes[w].box == b}
            if len(inside[v]) != m - 1:
                return None
            remote = _routes_from(topo, adjacency, v, lambda n: n.box is None)
            network[v] = {w: tuple(names[x] for x in p) for w, p in remote.items()}
    trees: list[Tree] = []
    count = len(box_ids)
    for b0 in box_ids:
        for r0_index, r0 in enumerate(rails):
            root = boxes[b0][r0]
            arcs: list[tuple[int, int]] = []
            routes: list[tuple[str, ...]] = []
            for w, route in inside[root].items():
                arcs.append((rank[root], rank[w]))
                routes.append(route)
            for shift in range(1, count):
                b = box_ids[(position[b0] + shift) % count]
                entry_rail = rails[(r0_index + shift) % m]
                src, dst = boxes[b0][entry_rail], boxes[b][entry_rail]
                route = network[src].get(dst)
                if route is None:
                    return None
                arcs.append((rank[src], rank[dst]))
                routes.append(route)
                for w, local_route in inside[dst].items():
                    arcs.append((rank[dst], rank[w]))
                    routes.append(local_route)
            trees.append(Tree(rank[root], k or 1, tuple(arcs), tuple(routes)))
    built = time.perf_counter()
    src_i, dst_i, cap, _ = _integer_capacities(topo)
    compute = [n.is_compute for n in topo.nodes]
    _num, den, side = _graph_module().max_ratio_cut(len(topo.nodes), compute, src_i, dst_i, cap)
    g = reduce(math.gcd, cap, 0)
    natural_k = den // math.gcd(den, g)
    cut = tuple(names[i] for i in side)
    bounded = time.perf_counter()
    achieved = evaluate_trees(topo, trees, k or 1)
    if achieved.time != cut_ratio(topo, cut):
        return None
    stats = {"seconds_construction": built - started, "seconds_bound": bounded - built,
             "seconds_check": time.perf_counter() - bounded}
    return trees, k or 1, natural_k, cut, achieved, stats
