"""Box entries (algorithms/box_entries.py): the rotation's trees entering a box through several
rails where the box's fabric binds. Every forest is checked by the independent evaluation
(achieved == cut bound as rationals), against brute force where the cuts can be enumerated and
against the generic path elsewhere; every refusal falls back to an exact generic forest."""
from __future__ import annotations

from fractions import Fraction

import pytest
from forest_checks import brute_force_bound, check_forest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forestcc.algorithms import generate_forest
from forestcc.algorithms.box_entries import plan_entries
from forestcc.algorithms.box_rotation import box_shape, rotation_forest
from forestcc.algorithms.forest import cut_ratio, throughput_bound
from forestcc.topology import Node, Topology, TopologyError, bidirectional
from forestcc.topology.presets import a100_fat_tree
from forestcc.topology.variants import (
    gpu_links,
    one_box_slower,
    one_gpu_slower,
    remove_links,
    scale_links,
)


def rail_cluster(boxes: int, gpus: int, leaves: int = 1, uplink: Fraction = Fraction(1)) -> Topology:
    """Boxes of `gpus` GPUs on an NVSwitch (300 GB/s), one 25 GB/s NIC per GPU on its rail's
    leaf; with `leaves` leaves per rail (boxes split evenly), each leaf joins its rail's spine at
    `uplink` times the bandwidth of its NICs (1: non-blocking)."""
    nodes, links = [], []
    per_leaf = boxes // leaves
    for b in range(boxes):
        for g in range(gpus):
            gpu = f"b{b}.gpu{g}"
            nodes.append(Node(gpu, "compute", rank=b * gpus + g, box=b, rail=g))
            links += bidirectional(gpu, f"b{b}.nvswitch", 300)
            links += bidirectional(gpu, f"leaf{b // per_leaf}.{g}", 25)
        nodes.append(Node(f"b{b}.nvswitch", "switch", box=b))
    for g in range(gpus):
        for leaf in range(leaves):
            nodes.append(Node(f"leaf{leaf}.{g}", "switch", rail=g))
            if leaves > 1:
                links += bidirectional(f"leaf{leaf}.{g}", f"spine.{g}", 25 * per_leaf * uplink)
        if leaves > 1:
            nodes.append(Node(f"spine.{g}", "switch", rail=g))
    return Topology(f"rails-{boxes}x{gpus}", nodes, links)


@st.composite
def degraded(draw, boxes: int, gpus: int, most: int | None = None):
    """A rail cluster where GPUs' NVLink runs at a random fraction of its speed, or failed
    (removed), and some NICs run faster or slower: both directions alike, switches balanced.
    Every GPU is drawn, or only up to `most` of them (so that big clusters keep some symmetry)."""
    topo = rail_cluster(boxes, gpus)
    everyone = [f"b{b}.gpu{g}" for b in range(boxes) for g in range(gpus)]
    chosen = everyone if most is None else draw(
        st.lists(st.sampled_from(everyone), min_size=1, max_size=most, unique=True))
    for gpu in chosen:
        fabric = draw(st.sampled_from([1, 1, 1, Fraction(3, 4), Fraction(1, 2), Fraction(1, 4),
                                       Fraction(1, 12), None]))
        if fabric is None:
            topo = remove_links(topo, gpu_links(topo, gpu, "nvlink"))
        elif fabric != 1:
            topo = scale_links(topo, gpu_links(topo, gpu, "nvlink"), fabric)
        nic = draw(st.sampled_from([1, 1, 1, 1, Fraction(1, 2), 2]))
        if nic != 1:
            topo = scale_links(topo, gpu_links(topo, gpu, "nic"), nic)
    return topo


def exact(topo: Topology, method: str = "auto", collective: str = "all_gather"):
    forest = generate_forest(topo, collective, method=method)
    check_forest(forest)
    assert forest.optimal, forest.report()
    return forest


SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@SETTINGS
@given(degraded(2, 3))
def test_degraded_gpus_against_brute_force(topo):
    forest = exact(topo)
    assert forest.bound_time == brute_force_bound(topo)


@SETTINGS
@given(degraded(4, 4, most=3))
def test_degraded_gpus_agree_with_the_generic_path(topo):
    forest = exact(topo)
    if forest.method != "generic":
        assert exact(topo, "generic").bound_time == forest.bound_time


def test_the_degraded_clusters_take_every_path():
    # the random clusters above are no use if they never reach the new construction
    seen = set()
    for box0, box1 in [(1, 1), (Fraction(1, 2), 1), (Fraction(1, 4), Fraction(1, 2)), (None, 1)]:
        topo = rail_cluster(4, 4)
        for factor, gpu in ((box0, "b0.gpu1"), (box1, "b2.gpu3")):
            if factor is None:
                topo = remove_links(topo, gpu_links(topo, gpu, "nvlink"))
            elif factor != 1:
                topo = scale_links(topo, gpu_links(topo, gpu, "nvlink"), factor)
        seen.add(exact(topo).method)
    assert seen == {"box-rotation", "box-entries", "generic"}


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "all_reduce"])
def test_half_nvlink_box_at_128_ranks(collective):
    topo = one_box_slower(a100_fat_tree(16, 16), box=0, part="nvlink")
    forest = exact(topo, collective=collective)
    assert forest.method == "box-entries" and forest.k == forest.natural_k == 7
    # the single-GPU cut of the slow box binds: 127 shards over 150 + 25 GB/s
    factor = 2 if collective == "all_reduce" else 1
    assert forest.bound_time == Fraction(127, 175) * factor
    assert forest.stats["boxes_with_extra_entries"] == 1


def test_several_slow_boxes_and_a_weak_gpu():
    topo = a100_fat_tree(16, 16)
    for box in (0, 3, 9):
        topo = one_box_slower(topo, box, "nvlink")
    # one GPU of box 5 at half its NVLink binds like the slow boxes' GPUs (a slower one would set
    # a larger bound of its own, and the slow boxes would no longer need extra entries)
    topo = one_gpu_slower(topo, "b5.gpu2", "nvlink", Fraction(1, 2))
    forest = exact(topo)
    assert forest.method == "box-entries" and forest.stats["boxes_with_extra_entries"] == 4


def test_a_weak_gpu_gets_helpers_for_what_it_cannot_forward():
    # GPU 3 of box 0 at a quarter of its NVLink saturates its NIC; the units it enters alone it
    # cannot forward to all seven others, so other rails take extra entries for them
    topo = one_gpu_slower(a100_fat_tree(16, 16), "b0.gpu3", "nvlink", Fraction(1, 4))
    shape = box_shape(topo)
    tau = throughput_bound(topo)[1]
    plan = plan_entries(topo, shape, cut_ratio(topo, tau), 4)
    entries = {e for e, _ in plan[0].values()}
    assert any(e[0] == 3 and len(e) > 1 for e in entries)  # helpers for units entering via 3
    assert exact(topo).method == "box-entries"


def _plan(topo: Topology, k: int = 8):
    _, cut = throughput_bound(topo)
    return plan_entries(topo, box_shape(topo), cut_ratio(topo, cut), k)


def test_a_rank_linked_into_another_box_is_left_to_the_generic_path():
    topo = rail_cluster(2, 4)
    topo = Topology("cross", topo.nodes, list(topo.links) + bidirectional("b0.gpu0", "b1.gpu1", 25))
    assert _plan(topo) is None
    assert exact(topo).method == "generic"


def test_a_box_whose_own_shards_must_leave_it_is_left_to_the_generic_path():
    # NVLink at 1/100: box 0's GPUs exchange their shards faster through the rail switches
    topo = one_box_slower(rail_cluster(2, 4), 0, "nvlink", Fraction(1, 100))
    assert _plan(topo) is None
    assert exact(topo).method == "generic"
    with pytest.raises(TopologyError, match="box rotation"):
        generate_forest(topo, method="box-rotation")


@pytest.mark.parametrize("nic", [Fraction(1, 2), None])
def test_one_slow_or_missing_nic_moves_entries_to_other_rails(nic):
    # rail 1 of box 0 cannot take the rotation's share of entries, nor send its share of box 0's
    # trees out: those units move to rails with room, on both sides
    topo = rail_cluster(4, 4)
    if nic is None:
        topo = remove_links(topo, gpu_links(topo, "b0.gpu1", "nic"))
    else:
        topo = one_gpu_slower(topo, "b0.gpu1", "nic", nic)
    forest = exact(topo)
    assert forest.method == "box-entries"
    plan = _plan(topo, forest.k)
    assert any(len(units) < 12 * forest.k for units in plan.values())  # partial: moved units
    assert exact(topo, "generic").bound_time == forest.bound_time


def test_a_slow_sending_nic_into_boxes_that_are_all_planned_falls_back():
    # boxes 1 and 2 need extra entries (NVLink at 1/4), so every unit into them is decided by
    # their quotas; b0.gpu1's NIC at half speed cannot send its rotation share into them, and no
    # box is left whose entries could move: the generic path takes it
    topo = rail_cluster(3, 4)
    for box in (1, 2):
        topo = one_box_slower(topo, box, "nvlink", Fraction(1, 4))
    topo = one_gpu_slower(topo, "b0.gpu1", "nic", Fraction(1, 2))
    generic = exact(topo, "generic")
    assert _plan(topo, generic.k) is None
    assert exact(topo).method == "generic"


def test_a_blocking_network_fails_the_evaluation_and_falls_back():
    # spines at a quarter of the leaves' NIC bandwidth: the spine cut binds, and the rotation's
    # trees cross it once per box instead of once per shard; the evaluation says so
    topo = rail_cluster(4, 2, leaves=2, uplink=Fraction(1, 4))
    assert _plan(topo) == {}  # no box needs extra entries: the NICs are not what binds
    assert rotation_forest(topo, None) is None
    assert exact(topo).method == "generic"


def test_gpu_links_selects_one_gpu_and_names_a_bad_one():
    topo = rail_cluster(2, 2)
    nvlink = [l for l in topo.links if gpu_links(topo, "b1.gpu0", "nvlink")(l)]
    nic = [l for l in topo.links if gpu_links(topo, "b1.gpu0", "nic")(l)]
    assert sorted((l.src, l.dst) for l in nvlink) == [("b1.gpu0", "b1.nvswitch"), ("b1.nvswitch", "b1.gpu0")]
    assert sorted((l.src, l.dst) for l in nic) == [("b1.gpu0", "leaf0.0"), ("leaf0.0", "b1.gpu0")]
    worn = one_gpu_slower(topo, "b1.gpu0", "nvlink", Fraction(11, 12))
    assert worn.capacities()[("b1.gpu0", "b1.nvswitch")] == 275
    for bad in ("b9.gpu0", "b1.nvswitch"):
        with pytest.raises(TopologyError, match=repr(bad)):
            gpu_links(topo, bad, "nvlink")


def test_a_box_entries_forest_runs_on_nine_ranks(tmp_path, no_new_shm):
    # the trees the box entries build are real schedules: compiled to plans and run by 9 processes
    # (an odd count) under forestcc-run, checked against numpy (tests/programs/forest_plan_check.py)
    from conftest import run_job

    from forestcc.algorithms.forest_plan import forest_plan
    from forestcc.plan import save
    topo = one_box_slower(rail_cluster(3, 3), 0, "nvlink", Fraction(1, 8))
    specs = []
    for collective in ("all_gather", "all_reduce"):
        plan, forest = forest_plan(topo, collective, mode="compact", max_slices=4,
                                   min_slice_bytes=4096)
        assert forest.method == "box-entries" and forest.optimal
        path = tmp_path / f"{collective}.json"
        save(plan, path)
        specs.append(f"{collective}:out_of_place:{path}")
    result = run_job(9, "forest_plan_check.py", "1,1001,30007", *specs)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    checked = result.lines("CHECKED")
    assert len(checked) == 9 and all(c.split()[3] == "0" for c in checked), result.stdout[-2000:]
