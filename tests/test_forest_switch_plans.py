"""Switch removal by checked plans (cpp/src/graph/switch_removal.cpp, isolateAtOnce): a switch is
isolated by one whole plan of splits that min(|in|, |out|) max-flows prove keeps Edmonds'
condition, instead of two max-flows per pair of its arcs. The plans must give the same exact
optimum as the pair-by-pair reference, on random heterogeneous clusters too, and a plan the
check refuses must not be used (pair by pair takes over)."""
from __future__ import annotations

import pytest
from forest_checks import check_forest
from hypothesis import given
from test_forest_heterogeneous import SETTINGS, perturbed, small_cluster

from forestcc import topology
from forestcc.algorithms.forest import _generic_forest
from forestcc.topology.model import COMPUTE, Node, Topology, bidirectional
from forestcc.topology.presets import a100_fat_tree


def generic_forests(topo, collective, *variants):
    """The generic forest once per set of `_generic_forest` options, each checked exact; all must
    reach the same bound with the same k (the smallest k at which the optimum is integral)."""
    graph = topo.reversed() if collective == "reduce_scatter" else topo
    factor = 2 if collective == "all_reduce" else 1
    forests = [_generic_forest(topo, graph, collective, None, factor, **options)
               for options in variants]
    for forest in forests:
        check_forest(forest)
        assert forest.optimal, forest.report()
        assert (forest.bound_time, forest.k) == (forests[0].bound_time, forests[0].k)
    return forests


def both(topo, collective="all_gather"):
    """The generic forest with batched plans and with the pair-by-pair reference."""
    batched, pairwise = generic_forests(topo, collective, {}, {"batch_switches": False})
    assert pairwise.stats["switches_batched"] == 0
    return batched, pairwise


@SETTINGS
@given(perturbed(small_cluster()))
def test_plans_match_pair_by_pair_on_perturbed_clusters(topo):
    both(topo)


@SETTINGS
@given(perturbed(small_cluster(boxes=3, gpus=3)))
def test_plans_match_pair_by_pair_on_odd_clusters(topo):
    both(topo, "all_reduce")


@pytest.mark.parametrize("name", ["dgx-a100x2", "mi250x2", "dgx-h100x2"])
def test_presets_are_isolated_by_plans(name):
    batched, pairwise = both(topology.preset(name))
    assert batched.stats["switches_batched"] > 0
    assert batched.stats["maxflows"] < pairwise.stats["maxflows"]


def test_fat_tree_needs_far_fewer_max_flows():
    # 32 ranks in 4 units: NVSwitches, leaves and spines all isolated by plans
    batched, pairwise = both(a100_fat_tree(4, 1))
    assert batched.stats["switches_pairwise"] == 0
    assert batched.stats["switches_batched"] == pairwise.stats["switches_pairwise"]
    assert batched.stats["maxflows"] * 2 < pairwise.stats["maxflows"]


def test_refused_plans_learn_every_violated_set():
    # 128 ranks in 2 units of 8 boxes: the last leaf switch's plans are refused by pairs of its
    # boxes, one pair per plan. The first four plans each learn the one set their check meets
    # first; then a plan learns every set its check finds, and the next plan holds. Were the
    # learning plans dropped, the switch would go pair by pair (about 11,000 more max-flows).
    forest = _generic_forest(a100_fat_tree(16, 8), a100_fat_tree(16, 8), "all_gather", None, 1)
    check_forest(forest)
    assert forest.optimal, forest.report()
    assert forest.stats["switches_pairwise"] == 0
    assert forest.stats["switches_batched"] == 16 + 8 + 2 * 8


def test_a_refused_plan_is_not_used():
    # mi250x4's network switch joins 64 GCDs whose xGMI meshes bind: every plan tried lowers some
    # tight set, the check refuses it and the switch goes pair by pair. Were the check skipped,
    # the plan's splits would break Edmonds' condition and packing would get stuck.
    batched, _ = both(topology.preset("mi250x4"))
    assert batched.stats["switches_pairwise"] >= 1


def by_node_and_by_arc(topo, collective="all_gather"):
    """The generic forest grown node by node and arc by arc."""
    forests = generic_forests(topo, collective, {"pack_by_node": True}, {"pack_by_node": False})
    assert forests[0].stats["arcs_by_batch"] > 0 and forests[1].stats["arcs_by_batch"] == 0
    return forests


@SETTINGS
@given(perturbed(small_cluster()))
def test_node_by_node_packing_matches_arc_by_arc_on_perturbed_clusters(topo):
    by_node_and_by_arc(topo)


@SETTINGS
@given(perturbed(small_cluster(boxes=3, gpus=3)))
def test_node_by_node_packing_matches_arc_by_arc_on_odd_clusters(topo):
    by_node_and_by_arc(topo, "all_reduce")


@pytest.mark.parametrize("name", ["dgx-a100x2", "mi250x2", "mi250x4", "torus-4x4", "dgx-h100x2"])
def test_node_by_node_packing_on_presets(name):
    by_node, by_arc = by_node_and_by_arc(topology.preset(name))
    assert by_node.stats["maxflows"] < by_arc.stats["maxflows"]


def test_node_by_node_packing_is_the_default_from_128_ranks():
    from forestcc.algorithms import generate_forest
    forest = generate_forest(a100_fat_tree(16, 16), method="generic")
    check_forest(forest)
    assert forest.optimal and forest.stats["arcs_by_batch"] > 0
    assert forest.stats["switches_pairwise"] == 0
    assert forest.stats["maxflows"] < 5_000  # 176,627 pair by pair and arc by arc


@pytest.mark.parametrize("boxes", [16, 64])
def test_a_refused_batch_is_taken_back_before_the_next_is_joined(boxes):
    # Packing checks two ranks' batches at once, the first joined on trust (runByNode): at 128
    # ranks one check after the other, from 512 on each on its own thread (kTwoCoresFrom). On these
    # fat trees (box 0 at half its NVLink) some batches fail as a whole: the first is then taken
    # back (and the second's check, made on the state with it, thrown away). A batch left joined,
    # or a second batch joined on its void check, breaks Lovász's condition: the packing gets
    # stuck or the forest falls short of the bound.
    from forestcc.algorithms import generate_forest
    from forestcc.topology.variants import one_box_slower
    topo = one_box_slower(a100_fat_tree(boxes, 16), 0, "nvlink")
    forest = generate_forest(topo, method="generic")
    check_forest(forest)
    assert forest.optimal, forest.report()
    assert forest.stats["batches_refused"] > 0 and forest.stats["arcs_by_batch"] > 0


def ring(ranks):
    """`ranks` compute nodes in a bidirectional ring: the cheapest topology to pack arc by arc."""
    nodes = [Node(f"r{i}", COMPUTE, rank=i) for i in range(ranks)]
    links = [link for i in range(ranks) for link in bidirectional(f"r{i}", f"r{(i + 1) % ranks}", 100, 1)]
    return Topology(f"ring-{ranks}", nodes, links, f"{ranks} ranks in a ring")


def test_arc_by_arc_packing_stays_the_default_below_128_ranks():
    # The forests whose simulated quality docs/forest-generation.md gives are packed arc by arc;
    # node-by-node packing starts at exactly 128 ranks.
    below, at = (_generic_forest(ring(n), ring(n), "all_gather", None, 1) for n in (127, 128))
    assert below.optimal and below.stats["arcs_by_batch"] == 0
    assert at.optimal and at.stats["arcs_by_batch"] > 0
