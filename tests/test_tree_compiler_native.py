"""The C++ tree compiler (cpp/src/plan/tree_compiler.cpp) against the Python reference
(algorithms/tree_plan.py, engine="python"): the same plan, op for op, channel for channel, route
for route, for random trees (interleaved roots, shared and reversed routes, folded reductions,
worker levels grouped to fit a channel limit) and for the forests and baselines of presets."""
from __future__ import annotations

import functools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forestcc import topology
from forestcc.algorithms.baselines import double_binary_tree_plan
from forestcc.algorithms.forest import generate_forest
from forestcc.algorithms.forest_plan import compile_forest, forest_tree_specs
from forestcc.algorithms.tree_plan import TreeSpec, compile_trees
from forestcc.plan import PlanBuilder, format as plan_format, verify
from forestcc.topology.presets import a100_fat_tree

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")


def both_ways(collective, nranks, trees, k, **options):
    """(plan dict, routes) from each engine, unvalidated (so that the comparison, not the
    validator, is what a difference fails)."""
    out = []
    for engine in ("python", "native"):
        builder, routes = compile_trees(collective, nranks, trees, k, engine=engine, **options)
        out.append((builder.build(validate=False), routes))
    return out


def assert_same(collective, nranks, trees, k, **options):
    (expected, expected_routes), (got, got_routes) = both_ways(collective, nranks, trees, k,
                                                               **options)
    for rank, (want, have) in enumerate(zip(expected["ranks"], got["ranks"])):
        assert have["channels"] == want["channels"], f"rank {rank} channels"
        assert len(have["workers"]) == len(want["workers"]), f"rank {rank} workers"
        for w, (a, b) in enumerate(zip(want["workers"], have["workers"])):
            assert b["ops"] == a["ops"], f"rank {rank} worker {w}"
    assert got == expected
    assert got_routes == expected_routes
    # The same text too: what is written is what the Python compiler wrote.
    assert plan_format.dumps(got) == plan_format.dumps(expected)
    return got


@st.composite
def random_trees(draw):
    """Trees on 2-7 ranks tiling the collective's chunks: templates reused so that neighbouring
    trees share arcs (segments of several trees), roots grouped or interleaved, routes absent or
    drawn from a few paths per arc (so some are shared and some differ, and direct ones give
    worker pairs lanes)."""
    collective = draw(st.sampled_from(COLLECTIVES))
    n = draw(st.integers(2, 7))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    with_routes = draw(st.booleans())

    def tree(root):
        order = [root] + rng.sample([r for r in range(n) if r != root], n - 1)
        arcs = tuple((order[rng.randrange(i)], order[i]) for i in range(1, n))
        # through one of two switches, or direct (one link: such worker pairs may take lanes)
        hop = [(), ("s0",), ("s1",)]
        routes = (tuple((f"r{p}",) + rng.choice(hop) + (f"r{c}",) for p, c in arcs)
                  if with_routes else None)
        return arcs, routes

    def split(total):  # tree sizes (multiplicities) summing to total
        sizes = []
        while total:
            sizes.append(rng.randint(1, total))
            total -= sizes[-1]
        return sizes

    specs = []
    if collective == "all_reduce":
        k = draw(st.integers(1, 12))
        templates = [tree(rng.randrange(n)) for _ in range(rng.randint(1, 3))]
        first = 0
        for size in split(k):
            arcs, routes = rng.choice(templates)
            root = next(p for p, _ in arcs if all(c != p for _, c in arcs))
            specs.append(TreeSpec(root, arcs, first, size, routes))
            first += size
    else:
        k = draw(st.integers(1, 4))
        for root in range(n):
            templates = [tree(root) for _ in range(rng.randint(1, 2))]
            first = 0
            for size in split(k):
                arcs, routes = rng.choice(templates)
                specs.append(TreeSpec(root, arcs, first, size, routes))
                first += size
        if draw(st.booleans()):
            rng.shuffle(specs)  # interleaved roots: segments only within runs of one root
    return collective, n, specs, k


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_trees(), st.sampled_from(["pipelined", "compact"]), st.booleans(),
       st.sampled_from([64, 6, 3, 2]))  # 6: spare channels run out mid-way through the lanes
def test_random_trees_compile_identically(case, mode, in_place, max_channels_per_peer):
    collective, n, specs, k = case
    assert_same(collective, n, specs, k, mode=mode, in_place=in_place,
                max_channels_per_peer=max_channels_per_peer)


@pytest.mark.parametrize("name", ["dgx-a100x2", "mi250x1", "torus-4x4", "dgx-h100x1"])
@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("mode", ["pipelined", "compact"])
def test_preset_forests_compile_identically(name, collective, mode):
    forest = generate_forest(topology.preset(name), collective)
    n = forest.topology.num_ranks
    k = forest.k * (n if collective == "all_reduce" else 1)
    plan = assert_same(collective, n, forest_tree_specs(forest), k, mode=mode)
    assert verify(plan_format.validate(plan)).ok


def test_fat_tree_all_reduce_compiles_identically():
    """128 ranks of the box rotation: deep trees with up to 22 children, thousands of segments."""
    forest = generate_forest(a100_fat_tree(16, 16), "all_reduce")
    n = forest.topology.num_ranks
    assert_same("all_reduce", n, forest_tree_specs(forest), forest.k * n)


def test_compile_forest_uses_the_native_engine_by_default(monkeypatch):
    """compile_forest's plan comes from the C++ compiler: with it broken, compiling fails."""
    forest = generate_forest(topology.preset("dgx-a100x1"), "all_reduce")
    from forestcc import _C
    called = []
    real = _C.plan.compile_trees

    def spy(*args, **kwargs):
        called.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(_C.plan, "compile_trees", spy)
    compile_forest(forest)
    assert called


def test_double_binary_tree_compiles_identically(monkeypatch):
    """The baseline's trees alternate roots (interleaved, not grouped by root)."""
    from forestcc.algorithms import baselines
    topo = topology.preset("dgx-a100x2")
    native = [double_binary_tree_plan(topo, in_place=p) for p in (False, True)]
    monkeypatch.setattr(baselines, "compile_trees", functools.partial(compile_trees, engine="python"))
    reference = [double_binary_tree_plan(topo, in_place=p) for p in (False, True)]
    assert native == reference
    assert all(verify(plan).ok for plan in native)


def test_unknown_engine_is_refused():
    specs = [TreeSpec(0, ((0, 1),), 0, 1), TreeSpec(1, ((1, 0),), 0, 1)]
    with pytest.raises(ValueError, match="engine must be one of"):
        compile_trees("all_gather", 2, specs, 1, engine="fortran")


def test_bad_trees_are_refused_before_either_engine():
    specs = [TreeSpec(0, ((0, 1),), 0, 1), TreeSpec(1, ((0, 1),), 0, 1)]  # root 1's arc from 0
    for engine in ("python", "native"):
        with pytest.raises(ValueError, match="tree 1: arc 0->1 out of order"):
            compile_trees("all_gather", 2, specs, 1, engine=engine)


def test_take_ranks_checks_the_rank_count():
    b = PlanBuilder("all_gather", 3)
    with pytest.raises(ValueError, match="2 channel lists and 3 worker lists for 3 ranks"):
        b.take_ranks([[], []], [[], [], []])


@pytest.mark.parametrize("trees, reverse, message", [
    ([(0, 0, 1, ((0, 1),), None), (1, 0, 1, ((0, 1),), None)], [], "tree 1: arc 0->1 out of order"),
    ([(0, 0, 1, ((0, 2),), None), (1, 0, 1, ((1, 0),), None)], [], "tree 0: arc 0->2 out of order"),
    ([(5, 0, 1, ((0, 1),), None)], [], "tree 0: root 5 outside 0..1"),
    ([(0, 0, 2, ((0, 1),), None)], [], r"tree 0: chunks 0..1 outside 0..0"),
    ([(0, 0, 1, ((0, 1),), [3])], [0], "tree 0: unknown route id 3"),
    ([(0, 0, 1, ((0, 1),), [0])], [4], "reverse route id 4 unknown"),
    ([(0, 0, 1, ((0, 1),), [0, 0])], [0], "tree 0 has 1 arcs but 2 route ids"),
])
def test_the_native_compiler_refuses_malformed_trees(trees, reverse, message):
    """_C.plan.compile_trees checks what its arrays rely on, even called directly (compile_trees
    checks the tiling before it)."""
    from forestcc import _C
    with pytest.raises(ValueError, match=message):
        _C.plan.compile_trees("all_gather", 2, 1, False, False, 64, trees, reverse)


def test_the_native_compiler_refuses_a_short_direct_route_list():
    from forestcc import _C
    trees = [(0, 0, 1, ((0, 1),), [0]), (1, 0, 1, ((1, 0),), [1])]
    with pytest.raises(ValueError, match="1 direct-route flags for 2 routes"):
        _C.plan.compile_trees("all_gather", 2, 1, False, False, 64, trees, [1, 0], [1])
