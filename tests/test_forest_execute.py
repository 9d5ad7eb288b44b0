"""Forest plans run on the CPU executor (issue 5, item 6): all_gather and all_reduce plans generated
for a 4-rank and an 8-rank topology, written to files and run by real processes under
forestcc-run through ``comm.all_gather(out, x, algo=path)`` / ``comm.all_reduce(x, algo=path)``,
checked against numpy (tests/programs/forest_plan_check.py)."""
from __future__ import annotations

from fractions import Fraction

import pytest
from conftest import run_job

from forestcc import topology
from forestcc.plan import save
from forestcc.topology import Link, Node, Topology

# Counts: one element, uneven (not divisible by the chunks), several slices of the pipeline.
COUNTS = "1,1001,300007"


def two_boxes(per_box: int, second: int | None = None) -> Topology:
    """Two boxes of `per_box` (and `second`) ranks on a switch each (100 GB/s), every rank also on
    one network switch (10 GB/s): forests use both, through switches. Boxes of different sizes take
    the generic path (switch removal by checked plans, then Edmonds packing)."""
    nodes, links = [], []
    rank = 0
    for b, size in enumerate((per_box, per_box if second is None else second)):
        nodes.append(Node(f"b{b}.sw", "switch", box=b))
        for g in range(size):
            name = f"b{b}.r{g}"
            nodes.append(Node(name, "compute", rank=rank, box=b, rail=g))
            rank += 1
            for src, dst, bw in ((name, f"b{b}.sw", 100), (name, "net", 10)):
                links += [Link(src, dst, Fraction(bw), Fraction(1)),
                          Link(dst, src, Fraction(bw), Fraction(1))]
    nodes.append(Node("net", "switch"))
    return Topology(f"two-boxes-{rank}", nodes, links)


def mesh4() -> Topology:
    """Four ranks joined directly, at 200, 100 and 50 GB/s (an MI250 box's shape, smaller): the
    forest's worker pairs differ in load on these links, so the plans have lanes."""
    nodes = [Node(f"g{i}", "compute", rank=i) for i in range(4)]
    links = []
    for a, b, bw in ((0, 1, 200), (2, 3, 200), (0, 3, 100), (1, 2, 100), (0, 2, 50), (1, 3, 50)):
        links += [Link(f"g{a}", f"g{b}", Fraction(bw), Fraction(1)),
                  Link(f"g{b}", f"g{a}", Fraction(bw), Fraction(1))]
    return Topology("mesh-4", nodes, links)


TOPOLOGIES = {4: two_boxes(2), 5: two_boxes(3, 2), 8: topology.preset("dgx-a100x1")}


def _write_plans(tmp_path, topo, mode):
    from forestcc.algorithms.forest_plan import forest_plan
    specs = []
    for collective, in_place in (("all_gather", False), ("all_gather", True),
                                 ("all_reduce", True), ("all_reduce", False)):
        plan, _ = forest_plan(topo, collective, mode=mode, in_place=in_place,
                              max_slices=4, min_slice_bytes=4096)
        layout = "in_place" if in_place else "out_of_place"
        path = tmp_path / f"{collective}_{layout}_{mode}.json"
        save(plan, path)
        specs.append(f"{collective}:{layout}:{path}")
    return specs


@pytest.mark.parametrize("mode", ["compact", "pipelined"])
@pytest.mark.parametrize("n", [4, 5, 8])
def test_forest_plans_run_on_the_cpu_executor(tmp_path, no_new_shm, n, mode):
    specs = _write_plans(tmp_path, TOPOLOGIES[n], mode)
    result = run_job(n, "forest_plan_check.py", COUNTS, *specs)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    checked = result.lines("CHECKED")
    assert len(checked) == n, result.stdout[-2000:]
    assert all(c.split()[1] == str(len(specs) * 3) and c.split()[3] == "0" for c in checked)


def test_forest_plans_with_lanes_run_on_the_cpu_executor(tmp_path, no_new_shm):
    """Lanes (tree_plan.py): a worker pair's puts spread over several channels, waited for on
    each; the plans must still move every byte right."""
    from forestcc.algorithms.forest import generate_forest
    from forestcc.algorithms.forest_plan import compile_forest
    topo = mesh4()
    for collective in ("all_gather", "all_reduce"):
        forest = generate_forest(topo, collective)
        channels = [sum(len(r["channels"]) for r in compile_forest(forest, lanes=lanes)["ranks"])
                    for lanes in (True, False)]
        assert channels[0] > channels[1]  # the plans below have lanes
    specs = _write_plans(tmp_path, topo, "pipelined")
    result = run_job(4, "forest_plan_check.py", COUNTS, *specs)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    checked = result.lines("CHECKED")
    assert len(checked) == 4, result.stdout[-2000:]
    assert all(c.split()[1] == str(len(specs) * 3) and c.split()[3] == "0" for c in checked)
