"""The generic path's trees are shallow (tree_packing.cpp's shared root level, tree_shallowing.cpp),
and stay exactly optimal: depth costs time in pipelined plans, exactness is never traded for it."""
from __future__ import annotations

from collections import deque

import pytest
from forest_checks import check_forest

from forestcc import topology
from forestcc.algorithms import generate_forest


def _depths(tree):
    depth = {tree.root: 0}
    for parent, child in tree.arcs:
        depth[child] = depth[parent] + 1
    return depth


def _hops(topo, root):
    """Rank -> fewest rank-to-rank links from root (the torus has no switches)."""
    ids = [n.id for n in topo.compute]
    nxt = {}
    for link in topo.links:
        nxt.setdefault(link.src, []).append(link.dst)
    dist = {ids[root]: 0}
    queue = deque([ids[root]])
    while queue:
        u = queue.popleft()
        for v in nxt.get(u, []):
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return {ids.index(v): d for v, d in dist.items()}


def test_torus_trees_reach_every_rank_by_a_shortest_path():
    # Packed one root at a time, the last roots' trees wound through what the first left (depth up
    # to 9 on a torus of diameter 4); now every rank sits at its hop distance from every root.
    topo = topology.preset("torus-4x4")
    forest = generate_forest(topo, "all_gather", method="generic")
    check_forest(forest)
    assert forest.optimal
    hops = {r: _hops(topo, r) for r in range(topo.num_ranks)}
    for tree in forest.trees:
        assert _depths(tree) == hops[tree.root]


@pytest.mark.parametrize("name, k, limit", [
    ("mi250x4", 1, 12),   # was 44 deep (packed one root at a time, not shallowed)
    ("mi250x4", None, 16),  # k = 8: was 27
    ("mi250x1", None, 10),  # k = 3: was 14
])
def test_mi250_trees_are_shallow(name, k, limit):
    forest = generate_forest(topology.preset(name), "all_gather", k, method="generic")
    check_forest(forest)
    assert forest.optimal == (k is None)
    assert max(max(_depths(t).values()) for t in forest.trees) <= limit
    assert forest.stats["shallowing_changes"] > 0


@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter"])
def test_shallow_forests_stay_exact_for_every_collective(collective):
    forest = generate_forest(topology.preset("mi250x2"), collective, method="generic")
    check_forest(forest)
    assert forest.optimal and forest.achieved_time == forest.bound_time


def test_mi250x4_trees_enter_most_boxes_straight_from_their_root():
    # Switch removal spreads each GCD's share of the switch over the other boxes in turn, so a
    # root's own uplink reaches every other box; it used to go to the next GCDs by index, all in
    # one box (35% of entries from the root at k = 8, the rest forwarded from deeper ranks).
    forest = generate_forest(topology.preset("mi250x4"), "all_gather", method="generic")
    assert forest.optimal
    entries = from_root = 0
    for tree in forest.trees:
        for parent, child in tree.arcs:
            if parent // 16 != child // 16:
                entries += tree.multiplicity
                from_root += tree.multiplicity * (parent == tree.root)
    assert entries == 3 * 64 * forest.k  # the box cut is tight: one entry per tree and other box
    assert from_root >= 0.8 * entries
