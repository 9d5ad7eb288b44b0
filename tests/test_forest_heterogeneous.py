"""Forests on non-uniform clusters: preset boxes with random per-cable speed changes and removed
cables, checked for exactness (achieved == bound as rationals, by the independent evaluation) and,
where every cut can be enumerated, against the brute-force bound."""
from __future__ import annotations

from fractions import Fraction

import pytest
from forest_checks import brute_force_bound, check_forest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from forestcc import topology
from forestcc.algorithms import generate_forest
from forestcc.topology import Link, Node, Topology, TopologyError, bidirectional
from forestcc.topology.variants import box_links, one_box_slower, remove_links, scale_links

# A cable's fate: most keep their speed; others run slower or faster, or are gone.
FACTORS = [Fraction(1), Fraction(1), Fraction(1), Fraction(1, 4), Fraction(1, 2), Fraction(3, 4),
           Fraction(2), None]


def small_cluster(boxes: int = 2, gpus: int = 4) -> Topology:
    """DGX-A100-like boxes cut down to `gpus` GPUs (NVSwitch 300 GB/s, a 25 GB/s NIC per GPU on
    switch ib.even or ib.odd by rail): a cluster with boxes and rails whose cuts can all be
    enumerated (2 x 4 GPUs: 12 nodes)."""
    nodes, links = [], []
    for b in range(boxes):
        for g in range(gpus):
            gpu = f"b{b}.gpu{g}"
            nodes.append(Node(gpu, "compute", rank=b * gpus + g, box=b, rail=g))
            links += bidirectional(gpu, f"b{b}.nvswitch", 300)
            links += bidirectional(gpu, "ib." + ("even", "odd")[g % 2], 25)
        nodes.append(Node(f"b{b}.nvswitch", "switch", box=b))
    nodes += [Node("ib.even", "switch"), Node("ib.odd", "switch")]
    return Topology(f"cluster-{boxes}x{gpus}", nodes, links)


def cables(topo: Topology) -> list[tuple[str, str]]:
    """Unordered node pairs joined by a link, in a fixed order."""
    return sorted({tuple(sorted((l.src, l.dst))) for l in topo.links})


@st.composite
def perturbed(draw, base: Topology):
    """`base` with every cable kept, sped up, slowed down or removed (both directions alike, so
    switches stay balanced), as long as every rank can still reach every other."""
    topo = base
    for pair in cables(base):
        factor = draw(st.sampled_from(FACTORS))
        on_cable = lambda l, pair=pair: tuple(sorted((l.src, l.dst))) == pair
        if factor is None:
            topo = remove_links(topo, on_cable)
        elif factor != 1:
            topo = scale_links(topo, on_cable, factor)
    assume(strongly_connected(topo))
    return topo


def strongly_connected(topo: Topology) -> bool:
    """Every rank reaches rank 0 and is reached from it (forwarding through switches)."""
    start = topo.compute[0].id
    for forward in (True, False):
        seen, stack = {start}, [start]
        while stack:
            v = stack.pop()
            for l in topo.links:
                a, b = (l.src, l.dst) if forward else (l.dst, l.src)
                if a == v and b not in seen:
                    seen.add(b)
                    stack.append(b)
        if any(n.id not in seen for n in topo.compute):
            return False
    return True


def check_exact(topo: Topology, method: str = "auto", collective: str = "all_gather"):
    forest = generate_forest(topo, collective, method=method)
    check_forest(forest)
    assert forest.optimal, forest.report()
    return forest


SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@SETTINGS
@given(perturbed(small_cluster()))
def test_perturbed_cluster_against_brute_force(topo):
    expected = brute_force_bound(topo)
    for method in ("auto", "generic"):
        forest = check_exact(topo, method)
        assert forest.bound_time == expected


@SETTINGS
@given(st.sampled_from(["dgx-a100x1", "dgx-h100x1"]).flatmap(
    lambda name: perturbed(topology.preset(name))))
def test_perturbed_box_against_brute_force(topo):
    assert check_exact(topo).bound_time == brute_force_bound(topo)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.sampled_from(["dgx-a100x2", "dgx-a100x4", "dgx-h100x2", "mi250x2"]).flatmap(
    lambda name: perturbed(topology.preset(name))))
def test_perturbed_presets_are_exact(topo):
    # too many nodes to enumerate cuts: exactness is the evaluation's achieved == bound, and the
    # two methods must agree on the optimum wherever the rotation applies
    auto = check_exact(topo)
    if auto.method == "box-rotation":
        assert check_exact(topo, "generic").bound_time == auto.bound_time


@pytest.mark.parametrize("part", ["nic", "nvlink"])
@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "all_reduce"])
def test_one_slower_box(part, collective):
    topo = one_box_slower(topology.preset("dgx-a100x4"), box=1, part=part)
    forest = check_exact(topo, collective=collective)
    generic = check_exact(topo, "generic", collective)
    assert forest.bound_time == generic.bound_time


def test_half_speed_nics_keep_the_rotation():
    # the slow box's NICs bind, and the rotation loads every NIC alike: still optimal, still fast
    topo = one_box_slower(topology.preset("dgx-a100x8"), box=0, part="nic")
    assert check_exact(topo).method == "box-rotation"


def test_half_nvlink_box_takes_extra_entries():
    # the slow box's GPUs bind through their NVLink: one rotation entry per tree cannot feed them,
    # entering that box through more rails per tree can
    topo = one_box_slower(topology.preset("dgx-a100x4"), box=0, part="nvlink")
    forest = check_exact(topo)
    assert forest.method == "box-entries" and forest.k == forest.natural_k
    assert forest.stats["boxes_with_extra_entries"] == 1


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.data())
def test_one_way_change_at_a_switch_is_refused_by_name(data):
    topo = small_cluster()
    switch_links = [l for l in topo.links if not topo.node(l.dst).is_compute]
    link = data.draw(st.sampled_from(switch_links))
    factor = data.draw(st.sampled_from([Fraction(1, 2), Fraction(2), Fraction(5, 4)]))
    one_way = scale_links(topo, lambda l: l == link, factor)
    with pytest.raises(TopologyError, match=f"switch {link.dst!r} receives"):
        generate_forest(one_way)


def test_box_links_selects_only_that_box():
    topo = topology.preset("dgx-a100x2")
    nic = [l for l in topo.links if box_links(topo, 1, "nic")(l)]
    nvlink = [l for l in topo.links if box_links(topo, 1, "nvlink")(l)]
    assert len(nic) == len(nvlink) == 16  # 8 GPUs, both directions
    assert all("b1.gpu" in l.src + l.dst and "ib." in l.src + l.dst for l in nic)
    assert all(l.src.startswith("b1.") and l.dst.startswith("b1.") for l in nvlink)
    with pytest.raises(TopologyError, match="no box 7"):
        box_links(topo, 7, "nic")
    with pytest.raises(ValueError, match="part"):
        box_links(topo, 0, "pcie")


def test_links_of_a_changed_cable_keep_their_latency():
    topo = small_cluster()
    slow = scale_links(topo, lambda l: l.src == "b0.gpu0", Fraction(1, 2))
    changed = [(a, b) for a, b in zip(topo.links, slow.links) if a != b]
    assert changed and all(b == Link(a.src, a.dst, a.bandwidth / 2, a.latency) for a, b in changed)
