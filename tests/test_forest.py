"""ForestColl forests: exact optimum, tree validity, link loads, against a brute-force cut bound."""
from __future__ import annotations

from fractions import Fraction

import pytest
from forest_checks import brute_force_bound, check_forest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forestcc import _graph, topology
from forestcc.algorithms import evaluate_trees, generate_forest, throughput_bound
from forestcc.algorithms.forest import cut_ratio
from forestcc.topology import Link, Node, Topology, TopologyError
from forestcc.topology.presets import a100_fat_tree

SMALL_PRESETS = ["dgx-a100x1", "dgx-a100x2", "dgx-a100x4", "dgx-a100x8", "dgx-h100x1", "dgx-h100x2",
                 "dgx-h100x4", "mi250x1", "mi250x2", "mi250x4", "torus-4x4"]


@pytest.mark.parametrize("name", SMALL_PRESETS)
def test_every_preset_reaches_its_bound_exactly(name):
    topo = topology.preset(name)
    for method in ("auto", "generic"):
        forest = generate_forest(topo, method=method)
        check_forest(forest)
        assert forest.optimal and forest.achieved_time == forest.bound_time
        assert forest.loss == 0
        assert forest.bound_algbw == throughput_bound(topo)[0]
        if forest.method == "generic":
            assert forest.k == forest.natural_k
        elif forest.method == "box-entries":  # k units per root, as the bound's denominator asks
            assert method == "auto" and forest.k == forest.natural_k
        else:  # one tree per root, which the evaluation just proved optimal
            assert method == "auto" and forest.method == "box-rotation" and forest.k == 1


def test_auto_takes_the_rotation_wherever_it_applies():
    # the rotation shortcut applies to boxes with one rank per rail, at any size; auto used to try
    # it only above 256 ranks
    for topo in (topology.preset("dgx-a100x4"), a100_fat_tree(32, 16)):
        forest = generate_forest(topo)
        assert forest.method == "box-rotation" and forest.optimal
    # no rails, no rotation: auto falls back to the generic path
    assert generate_forest(topology.preset("torus-4x4")).method == "generic"


def _unbalanced_switch() -> Topology:
    """dgx-a100x2 where ib.even sends b0.gpu0 twice what it receives from it."""
    topo = topology.preset("dgx-a100x2")
    links = [Link(l.src, l.dst, l.bandwidth * (2 if (l.src, l.dst) == ("ib.even", "b0.gpu0") else 1),
                  l.latency) for l in topo.links]
    return Topology("unbalanced", topo.nodes, links)


def test_a_switch_that_sends_more_than_it_receives_is_refused_by_name():
    topo = _unbalanced_switch()
    for collective in ("all_gather", "reduce_scatter"):
        for method in ("auto", "generic", "box-rotation"):
            with pytest.raises(TopologyError, match="switch 'ib.even' receives 200 GB/s but sends 225"):
                generate_forest(topo, collective, method=method)
    assert throughput_bound(topo)[0] > 0  # the cut bound is still a valid bound


def test_cli_refuses_an_unbalanced_switch_as_bad_input(tmp_path, capsys):
    from forestcc.topology.cli import topo_main
    path = tmp_path / "unbalanced.json"
    topology.save(_unbalanced_switch(), path)
    assert topo_main(["forest", str(path)]) == 2
    assert "switch 'ib.even'" in capsys.readouterr().err


def test_dgx_a100x2_matches_the_reference_optimum():
    forest = generate_forest(topology.preset("dgx-a100x2"))
    assert forest.bound_algbw == Fraction(1040, 3)  # 346.67 GB/s all_gather algbw
    assert round(float(forest.achieved_algbw), 2) == 346.67
    assert forest.natural_k == 13
    assert sum(t.multiplicity for t in forest.trees if t.root == 0) == 13


@pytest.mark.parametrize("name", ["dgx-a100x1", "dgx-h100x1"])
def test_small_presets_against_brute_force(name):
    topo = topology.preset(name)
    assert throughput_bound(topo)[0] == topo.num_ranks / brute_force_bound(topo)


def test_fat_tree_1024_reaches_its_bound():
    topo = topology.preset("a100-fattree-1024")
    forest = generate_forest(topo)
    assert forest.method == "box-rotation"
    assert forest.optimal
    assert forest.bound_algbw == Fraction(25600, 127)  # one box's eight 25 GB/s NICs bind
    assert len(forest.trees) == 1024


def test_box_rotation_agrees_with_generic_where_both_apply():
    topo = topology.preset("dgx-a100x4")
    rotated = generate_forest(topo, method="box-rotation")
    generic = generate_forest(topo, method="generic")
    check_forest(rotated)
    assert rotated.optimal and rotated.achieved_time == generic.achieved_time
    with pytest.raises(TopologyError, match="box rotation"):
        generate_forest(topology.preset("torus-4x4"), method="box-rotation")


def test_fixed_k_reports_the_loss():
    topo = topology.preset("dgx-a100x2")
    one = generate_forest(topo, k=1)
    check_forest(one, k=1)
    assert not one.optimal and one.loss > 0
    assert one.achieved_algbw < Fraction(1040, 3)
    twice = generate_forest(topo, k=26)  # any multiple of the natural k is exact
    check_forest(twice, k=26)
    assert twice.optimal
    assert "loss" in one.report() and "optimal    yes" in twice.report()


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_reduce"])
def test_other_collectives(collective):
    topo = topology.preset("dgx-a100x2")
    forest = generate_forest(topo, collective)
    check_forest(forest)
    assert forest.optimal
    expected = Fraction(1040, 3) / (2 if collective == "all_reduce" else 1)
    assert forest.bound_algbw == expected
    # reduce_scatter data flows child -> parent
    tree = forest.trees[0]
    if collective == "reduce_scatter":
        assert tree.routes[0][-1] == topo.compute[tree.arcs[0][0]].id


def test_reduce_scatter_uses_the_reversed_graph():
    # a directed ring with a faster clockwise direction: reduce_scatter sees the other direction
    nodes = [Node(f"n{i}", "compute", i) for i in range(3)]
    links = [Link(f"n{i}", f"n{(i + 1) % 3}", Fraction(10)) for i in range(3)]
    links += [Link(f"n{(i + 1) % 3}", f"n{i}", Fraction(4)) for i in range(3)]
    topo = Topology("ring", nodes, links)
    ag = generate_forest(topo, "all_gather")
    rs = generate_forest(topo, "reduce_scatter")
    assert ag.optimal and rs.optimal
    assert ag.bound_time == rs.bound_time == brute_force_bound(topo)
    with pytest.raises(TopologyError, match="both directions"):
        generate_forest(topo, "all_reduce")


def test_disconnected_topology_is_rejected():
    nodes = [Node("a", "compute", 0), Node("b", "compute", 1), Node("c", "compute", 2)]
    topo = Topology("cut", nodes, [Link("a", "b", Fraction(1)), Link("b", "a", Fraction(1))])
    with pytest.raises(ValueError, match="cannot reach|cannot be reached"):
        generate_forest(topo)


def test_evaluation_rejects_broken_trees():
    forest = generate_forest(topology.preset("dgx-a100x1"))
    tree = forest.trees[0]
    from forestcc.algorithms import Tree
    short = Tree(tree.root, tree.multiplicity, tree.arcs[:-1], tree.routes[:-1])
    with pytest.raises(ValueError, match="spanning tree"):
        evaluate_trees(forest.topology, [short] + forest.trees[1:], forest.k)
    bad_route = Tree(tree.root, tree.multiplicity, tree.arcs,
                     (("b0.gpu0", "b0.gpu5"),) + tree.routes[1:])
    with pytest.raises(ValueError):
        evaluate_trees(forest.topology, [bad_route] + forest.trees[1:], forest.k)


def test_max_flow_core():
    # two disjoint paths 0->1->3 (cap 3, 2) and 0->2->3 (cap 5, 7), plus a cross arc 1->2 (4)
    assert _graph.max_flow(4, [0, 1, 0, 2, 1], [1, 3, 2, 3, 2], [3, 2, 5, 7, 4], 0, 3) == 8
    assert _graph.max_flow(2, [0], [1], [2**50], 0, 1) == 2**50  # no 32-bit wrap


# ---- random topologies -------------------------------------------------------------------------
@st.composite
def random_topologies(draw):
    """2-6 ranks and 0-3 switches (at most 9 nodes, so every cut can be enumerated), connected by a
    random spanning tree plus extra links. Links at switches are symmetric (a full-duplex cable);
    links between two ranks may have different bandwidths in the two directions."""
    ranks = draw(st.integers(2, 6))
    switches = draw(st.integers(0, 3))
    ids = [f"r{i}" for i in range(ranks)] + [f"s{i}" for i in range(switches)]
    nodes = [Node(i, "compute", rank) for rank, i in enumerate(ids[:ranks])]
    nodes += [Node(i, "switch") for i in ids[ranks:]]
    bandwidth = st.integers(1, 20)
    pairs = {}
    for v in range(1, len(ids)):  # spanning tree
        u = draw(st.integers(0, v - 1))
        pairs[(u, v)] = None
    extra = draw(st.lists(st.tuples(st.integers(0, len(ids) - 1), st.integers(0, len(ids) - 1)),
                          max_size=10))
    for u, v in extra:
        if u != v:
            pairs[(min(u, v), max(u, v))] = None
    links = []
    for u, v in pairs:
        forward = draw(bandwidth)
        both_ranks = u < ranks and v < ranks
        backward = draw(bandwidth) if both_ranks and draw(st.booleans()) else forward
        links.append(Link(ids[u], ids[v], Fraction(forward)))
        links.append(Link(ids[v], ids[u], Fraction(backward)))
    return Topology("random", nodes, links)


FAST = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(random_topologies())
def test_random_bound_matches_brute_force(topo):
    algbw, cut = throughput_bound(topo)
    expected = brute_force_bound(topo)
    assert algbw == topo.num_ranks / expected
    assert cut_ratio(topo, cut) == expected


@FAST
@given(random_topologies())
def test_random_forests_are_optimal(topo):
    forest = generate_forest(topo)
    check_forest(forest)
    assert forest.optimal, forest.report()
    assert forest.bound_time == brute_force_bound(topo)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(random_topologies(), st.integers(1, 3))
def test_random_forests_with_fixed_k(topo, k):
    forest = generate_forest(topo, k=k)
    check_forest(forest, k=k)
    # the loss is exactly what the link loads say, and zero when k is a multiple of the natural k
    assert forest.loss == 1 - forest.bound_time / forest.achieved_time
    if k % forest.natural_k == 0:
        assert forest.optimal


@settings(max_examples=30, deadline=None, derandomize=True)
@given(random_topologies())
def test_random_reduce_scatter(topo):
    forest = generate_forest(topo, "reduce_scatter")
    check_forest(forest)
    assert forest.optimal
    assert forest.bound_time == brute_force_bound(topo.reversed())


def test_cli_prints_bound_and_achieved(capsys):
    from forestcc.topology.cli import topo_main
    assert topo_main(["forest", "dgx-a100x2"]) == 0
    out = capsys.readouterr().out
    assert "346.67" in out and "1040/3" in out and "optimal    yes" in out
    assert topo_main(["forest", "dgx-a100x2", "--k", "1"]) == 0
    assert "loss" in capsys.readouterr().out
    assert topo_main(["show", "dgx-a100x2", "--bound"]) == 0
    assert "346.67 GB/s" in capsys.readouterr().out
