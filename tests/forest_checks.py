"""Checks shared by the forest tests: the cut bound by enumeration, and a forest's evidence."""
from __future__ import annotations

import itertools
from fractions import Fraction

from forestcc.algorithms import evaluate_trees
from forestcc.topology import Topology


def brute_force_bound(topo: Topology) -> Fraction:
    """max over all node sets S with ranks on both sides of |S ∩ Vc| / B+(S), by enumeration.
    Written from the definition only; shares no code with the generator."""
    nodes = [n.id for n in topo.nodes]
    compute = {n.id for n in topo.compute}
    links = [(l.src, l.dst, l.bandwidth) for l in topo.links]
    best = Fraction(0)
    for size in range(1, len(nodes)):
        for chosen in itertools.combinations(nodes, size):
            inside = set(chosen)
            ranks = len(inside & compute)
            if ranks == 0 or ranks == len(compute):
                continue
            leaving = sum((bw for s, d, bw in links if s in inside and d not in inside), Fraction(0))
            assert leaving > 0, "test topologies are strongly connected"
            best = max(best, Fraction(ranks) / leaving)
    return best


def check_forest(forest, k=None):
    """Trees span every rank, each root has k trees, every link finishes within the achieved time,
    and the printed numbers are what an independent evaluation gives."""
    topo = forest.topology
    again = evaluate_trees(topo, forest.trees, forest.k, forest.collective)  # raises when invalid
    assert again.time == forest.achieved_time
    for tree in forest.trees:
        assert {c for _, c in tree.arcs} | {tree.root} == set(range(topo.num_ranks))
    caps = topo.capacities()
    for hop, load in again.loads.items():
        assert load <= forest.achieved_time * caps[hop] * (2 if forest.collective == "all_reduce" else 1)
    assert forest.achieved_time >= forest.bound_time
    if k is not None:
        assert forest.k == k
