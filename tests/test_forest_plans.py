"""Forest plans (and the baselines) as plan files: they verify on presets and on random topologies,
carry each tree's share of the data over the forest's routes, fit the executor's limits, and the
`forestcc plan generate forest` command prints the evidence and writes them."""
from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forestcc import topology
from forestcc.algorithms.baselines import (
    double_binary_tree_plan,
    hierarchical_plan,
    ring_orders,
    ring_plan,
)
from forestcc.algorithms.forest import generate_forest
from forestcc.algorithms.forest_plan import compile_forest, forest_plan
from forestcc.algorithms.tree_plan import (
    MAX_CHANNELS_PER_PEER,
    MAX_REDUCE_SOURCES,
)
from forestcc.plan import load, ops, verify
from forestcc.plan.cli import plan_main
from forestcc.plan.simulator import plan_routes
from forestcc.topology import Link, Node, Topology

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
# Presets whose plans verify in about a second each on a small machine.
PRESETS = ["dgx-a100x1", "dgx-a100x2", "dgx-h100x1", "dgx-h100x2", "mi250x1", "torus-4x4"]


def check_plan(plan, forest):
    """Verifies, and checks what the verifier does not: provenance, executor limits, routes."""
    result = verify(plan)
    assert result.ok, str(result)
    topo = forest.topology
    n = topo.num_ranks
    assert plan["chunks_per_block"] == forest.k * (n if forest.collective == "all_reduce" else 1)
    provenance = plan["provenance"]
    assert provenance["generator"] == "forestcc.forest"
    assert provenance["topology_fingerprint"] == topo.fingerprint()
    assert provenance["predicted_time_us"] > 0
    params = provenance["params"]
    assert params["k"] == forest.k and params["collective"] == forest.collective
    assert Fraction(params["bound_algbw"]) == forest.bound_algbw
    assert Fraction(params["achieved_algbw"]) == forest.achieved_algbw
    per_peer = Counter()
    ids = [node.id for node in topo.compute]
    for entry in plan["ranks"]:
        r = entry["rank"]
        for ch in entry["channels"]:
            per_peer[(r, ch["peer"])] += 1
            index = params["channel_routes"][r][ch["id"]]
            if index >= 0:
                route = params["routes"][index]
                assert (route[0], route[-1]) == (ids[r], ids[ch["peer"]])
        for worker in entry["workers"]:
            assert worker["ops"], "no empty workers"
            for op in worker["ops"]:
                assert len(op.get("srcs", ())) <= MAX_REDUCE_SOURCES
    assert max(per_peer.values()) <= MAX_CHANNELS_PER_PEER
    return result


def link_chunks(plan, topo):
    """Chunks crossing each link in one slice, from the plan's puts and the recorded routes."""
    from forestcc.plan.simulator import _Network
    net = _Network(topo)
    names = {i: key for key, i in net.link_ids.items()}
    routes = plan_routes(plan, topo)
    loads = Counter()
    for entry in plan["ranks"]:
        for worker in entry["workers"]:
            for op in worker["ops"]:
                if op["op"] in (ops.PUT, ops.PUT_SIGNAL, ops.REDUCE_PUT):
                    for link in routes[(entry["rank"], op["ch"])]:
                        loads[names[link]] += op.get("n", 1)
    return loads


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_presets_verify(name, collective):
    plan, forest = forest_plan(topology.preset(name), collective)
    check_plan(plan, forest)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_plan_link_loads_are_the_forests(collective):
    # every tree moves exactly its share: per link, the plan's chunks are the forest's loads x k
    topo = topology.preset("dgx-a100x2")
    plan, forest = forest_plan(topo, collective)
    loads = link_chunks(plan, topo)
    # loads count shards (all_reduce: both phases), a chunk is 1/k of one
    expected = {hop: load * forest.k for hop, load in forest.achieved.loads.items() if load}
    assert dict(loads) == expected


@pytest.mark.parametrize("mode", ["compact", "pipelined"])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_modes_and_in_place(mode, in_place, collective):
    plan, forest = forest_plan(topology.preset("dgx-a100x1"), collective, mode=mode,
                               in_place=in_place)
    check_plan(plan, forest)
    assert plan["in_place"] is in_place
    if mode == "compact":  # a worker and a doorman per rank
        assert all(len(entry["workers"]) <= 2 for entry in plan["ranks"])
        assert plan["pipeline"]["max_slices"] == 1


@pytest.mark.parametrize("k", [1, 2, 26])
def test_fixed_k(k):
    topo = topology.preset("dgx-a100x2")
    forest = generate_forest(topo, "all_gather", k)
    plan = compile_forest(forest, mode="compact")
    check_plan(plan, forest)
    assert plan["provenance"]["params"]["optimal"] is forest.optimal
    assert Fraction(plan["provenance"]["params"]["loss"]) == forest.loss


def test_64_rank_preset_fits_the_executor():
    # compiled and checked structurally (verifying 64 ranks takes tens of seconds)
    topo = topology.preset("dgx-a100x8")
    plan, forest = forest_plan(topo, "all_gather")
    per_peer = Counter((e["rank"], c["peer"]) for e in plan["ranks"] for c in e["channels"])
    assert max(per_peer.values()) <= MAX_CHANNELS_PER_PEER
    assert dict(link_chunks(plan, topo)) == {hop: load * forest.k
                                             for hop, load in forest.achieved.loads.items()}


# ---- random topologies --------------------------------------------------------------------------
@st.composite
def random_topologies(draw, symmetric=False):
    """2-6 ranks and 0-2 switches joined by a random spanning tree plus extra links; links at
    switches are full duplex, links between ranks may differ by direction unless symmetric."""
    ranks = draw(st.integers(2, 6))
    switches = draw(st.integers(0, 2))
    ids = [f"r{i}" for i in range(ranks)] + [f"s{i}" for i in range(switches)]
    nodes = [Node(i, "compute", rank) for rank, i in enumerate(ids[:ranks])]
    nodes += [Node(i, "switch") for i in ids[ranks:]]
    pairs = {}
    for v in range(1, len(ids)):
        pairs[(draw(st.integers(0, v - 1)), v)] = None
    for u, v in draw(st.lists(st.tuples(st.integers(0, len(ids) - 1),
                                        st.integers(0, len(ids) - 1)), max_size=8)):
        if u != v:
            pairs[(min(u, v), max(u, v))] = None
    links = []
    for u, v in pairs:
        forward = draw(st.integers(1, 20))
        both_ranks = u < ranks and v < ranks
        backward = (draw(st.integers(1, 20)) if both_ranks and not symmetric
                    and draw(st.booleans()) else forward)
        latency = Fraction(draw(st.integers(0, 3)))
        links.append(Link(ids[u], ids[v], Fraction(forward), latency))
        links.append(Link(ids[v], ids[u], Fraction(backward), latency))
    return Topology("random", nodes, links)


RANDOM = settings(max_examples=25, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow])


@RANDOM
@given(random_topologies(), st.sampled_from(["all_gather", "reduce_scatter"]),
       st.sampled_from(["pipelined", "compact"]), st.booleans())
def test_random_topologies_verify(topo, collective, mode, in_place):
    plan, forest = forest_plan(topo, collective, mode=mode, in_place=in_place)
    check_plan(plan, forest)


@RANDOM
@given(random_topologies(symmetric=True), st.sampled_from(["pipelined", "compact"]),
       st.integers(1, 3))
def test_random_all_reduce_verifies(topo, mode, k):
    plan, forest = forest_plan(topo, "all_reduce", k, mode=mode)
    check_plan(plan, forest)


# ---- baselines ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["dgx-a100x1", "dgx-a100x2", "mi250x1", "torus-4x4"])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_baselines_verify(name, collective):
    topo = topology.preset(name)
    plans = [ring_plan(topo, collective), ring_plan(topo, collective, in_place=True)]
    if collective == "all_reduce":
        plans.append(double_binary_tree_plan(topo))
    if name == "dgx-a100x2":
        plans += [hierarchical_plan(topo, collective),
                  hierarchical_plan(topo, collective, in_place=True)]
    for plan in plans:
        assert verify(plan).ok, str(verify(plan))
        assert plan["provenance"]["topology_fingerprint"] == topo.fingerprint()


def test_baselines_say_when_they_do_not_apply():
    torus = topology.preset("torus-4x4")
    with pytest.raises(ValueError, match="boxes"):
        hierarchical_plan(torus)
    with pytest.raises(ValueError, match="all_reduce"):
        double_binary_tree_plan(torus, "all_gather")


def test_ring_orders_follow_the_topology():
    # rail-optimized boxes: one ring per rail, crossing between boxes on one rail each way
    rings = ring_orders(topology.preset("dgx-a100x2"))
    assert len(rings) == 8
    assert rings[0] == [0, 1, 2, 3, 4, 5, 6, 7, 15, 14, 13, 12, 11, 10, 9, 8]
    # a torus decomposes into two edge-disjoint Hamiltonian cycles, each run both ways
    torus = topology.preset("torus-4x4")
    rings = ring_orders(torus)
    assert len(rings) == 4
    linked = {(torus.rank_of(a), torus.rank_of(b)) for a, b in torus.capacities()}
    pairs = [frozenset(p) for p in zip(rings[0], rings[0][1:] + rings[0][:1])]
    assert all(tuple(p) in linked for p in pairs)
    second = [frozenset(p) for p in zip(rings[2], rings[2][1:] + rings[2][:1])]
    assert not set(pairs) & set(second)


# ---- the command --------------------------------------------------------------------------------
def test_generate_forest_command(tmp_path, capsys):
    out = tmp_path / "ag.json"
    assert plan_main(["generate", "forest", "--topology", "dgx-a100x2", "--collective",
                      "all_gather", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "346.67" in text and "1040/3" in text and "optimal    yes" in text
    assert "verified   OK" in text
    plan = load(out)
    assert plan["collective"] == "all_gather" and plan["nranks"] == 16
    assert plan["provenance"]["params"]["k"] == 13


def test_generate_forest_command_with_fixed_k(tmp_path, capsys):
    out = tmp_path / "ar.json"
    assert plan_main(["generate", "forest", "--topology", "dgx-a100x1", "--collective",
                      "all_reduce", "--k", "1", "--mode", "compact", "--in-place",
                      "-o", str(out)]) == 0
    assert "optimal    yes" in capsys.readouterr().out  # k=1 is optimal on one box
    plan = json.loads(out.read_text())
    assert plan["in_place"] and plan["provenance"]["params"]["mode"] == "compact"
    assert plan_main(["generate", "forest", "--topology", "dgx-a100x2", "--k", "1",
                      "--no-verify", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "loss       1.099%" in text and "verified" not in text


def test_generate_forest_command_errors(tmp_path, capsys):
    out = tmp_path / "x.json"
    assert plan_main(["generate", "forest", "--topology", str(tmp_path / "missing.json"),
                      "-o", str(out)]) == 2
    assert "forestcc plan generate forest:" in capsys.readouterr().err
    assert not out.exists()
    asymmetric = tmp_path / "directed.json"
    topo = Topology("ring3", [Node(f"n{i}", "compute", i) for i in range(3)],
                    [Link(f"n{i}", f"n{(i + 1) % 3}", Fraction(10)) for i in range(3)]
                    + [Link(f"n{(i + 1) % 3}", f"n{i}", Fraction(4)) for i in range(3)])
    topology.save(topo, asymmetric)
    assert plan_main(["generate", "forest", "--topology", str(asymmetric), "--collective",
                      "all_reduce", "-o", str(out)]) == 2
    assert "both directions" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        plan_main(["generate", "forest", "--topology", "dgx-a100x1", "--collective", "barrier",
                   "-o", str(out)])
