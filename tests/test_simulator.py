"""The plan simulator: exact times on tiny hand-made topologies, the forest against the bound on
presets, no plan beating the bound, and the `plan simulate` / `plan report` commands."""
from __future__ import annotations

import json
from fractions import Fraction

import pytest

from forestcc import topology
from forestcc.algorithms.baselines import (
    double_binary_tree_plan,
    hierarchical_plan,
    ring_plan,
)
from forestcc.algorithms.forest import throughput_bound
from forestcc.algorithms.forest_plan import forest_plan
from forestcc.plan import PlanBuilder, reference, save
from forestcc.plan.cli import plan_main
from forestcc.plan.simulator import SimulationError, bus_factor, simulate
from forestcc.topology import Link, Node, Topology

MB = 1_000_000


def duplex(a, b, bandwidth, latency=0):
    return [Link(a, b, Fraction(bandwidth), Fraction(latency)),
            Link(b, a, Fraction(bandwidth), Fraction(latency))]


def pair(bandwidth=10, latency=0):
    """Two ranks joined by one full-duplex link (GB/s = 1000 bytes per microsecond)."""
    return Topology("pair", [Node("a", "compute", 0), Node("b", "compute", 1)],
                    duplex("a", "b", bandwidth, latency))


def star(bandwidths, latency=0):
    """Ranks r0..r{n-1} on one switch s; rank i's link to the switch has bandwidths[i]."""
    nodes = [Node(f"r{i}", "compute", i) for i in range(len(bandwidths))] + [Node("s", "switch")]
    links = []
    for i, bw in enumerate(bandwidths):
        links += duplex(f"r{i}", "s", bw, latency)
    return Topology("star", nodes, links)


def senders_to_last(nranks, chunks_of=None):
    """A gather-like plan: every rank but the last puts its input into the last rank's output
    block (rank i's input is chunks_of[i] times the block), after the last rank said it entered."""
    last = nranks - 1
    b = PlanBuilder("gather", nranks, chunks_per_block=1, root=last)
    w_last = b.worker(last)
    b.copy(last, w_last, ("input", 0), ("output", last))
    chans = {}
    for q in range(last):
        chans[q] = b.channel_pair(q, last)
        b.signal(last, w_last, chans[q][1])
    for q in range(last):
        w = b.worker(q)
        b.wait(q, w, chans[q][0])
        b.put_signal(q, w, chans[q][0], ("input", 0), ("output", q))
    for q in range(last):
        b.wait(last, w_last, chans[q][1])
    return b.build(generator="test")


# ---- exact times --------------------------------------------------------------------------------
def test_one_link():
    # sendrecv of 1 MB over 10 GB/s with 1 us per hop: entry signal (1 us), the put (100 us) and
    # its arrival (1 us); both directions run at once on their own links
    result = simulate(reference.ring_sendrecv(2), pair(10, 1), MB)
    assert result.time_us == pytest.approx(102.0)
    assert result.algbw == pytest.approx(MB / 102.0 / 1e3)
    assert result.busbw == result.algbw  # factor 1 for sendrecv
    assert result.transfers == 2


def test_latency_term():
    # nothing to move: two latencies (entry signal, then the data signal); per hop on a 2-hop path
    assert simulate(reference.ring_sendrecv(2), pair(10, 5), 0).time_us == pytest.approx(10.0)
    # through a switch the path latency is two hops: 2 x 3 us each way
    assert simulate(senders_to_last(2), star([10, 10], 3), 0).time_us == pytest.approx(12.0)


def test_two_transfers_share_a_link():
    # two senders, one receiver: its 10 GB/s downlink carries both 1 MB transfers at 5 GB/s each
    topo = star([10, 10, 10])
    gather = senders_to_last(3)
    one = simulate(senders_to_last(2), star([10, 10]), 2 * MB)  # 1 MB per rank
    both = simulate(gather, topo, 3 * MB)
    assert one.time_us == pytest.approx(100.0)
    assert both.time_us == pytest.approx(200.0)


def test_processor_sharing_is_work_conserving():
    # 1 MB from rank 0 and 3 MB from rank 1 share rank 2's 10 GB/s downlink: 5 GB/s each until
    # the small one is done (200 us), then the big one has it alone for its last 2 MB (200 us)
    b = PlanBuilder("gather", 3, chunks_per_block=4, root=2)  # a chunk is a quarter of a block
    w2 = b.worker(2)
    chans = [b.channel_pair(q, 2) for q in range(2)]
    for _, theirs in chans:
        b.signal(2, w2, theirs)
    for q, n in ((0, 1), (1, 3)):  # timing only: not a whole gather
        w = b.worker(q)
        b.wait(q, w, chans[q][0])
        b.put_signal(q, w, chans[q][0], ("input", 0), ("output", 4 * q), n=n)
    for _, theirs in chans:
        b.wait(2, w2, theirs)
    plan = b.build(generator="test")
    result = simulate(plan, star([10, 10, 10]), 3 * 4 * MB)  # blocks of 4 MB, chunks of 1 MB
    assert result.time_us == pytest.approx(400.0)


def test_cut_through_takes_the_slowest_hop():
    # 10 GB/s up to the switch, 5 GB/s down: 1 MB takes 200 us, not 100 + 200
    assert simulate(senders_to_last(2), star([10, 5]), 2 * MB).time_us == pytest.approx(200.0)


def test_slices_pipeline_down_a_chain():
    # broadcast 0 -> 1 -> 2 over 10 GB/s links, no latency: one slice takes 2 x 100 us; with S
    # slices rank 1 forwards slice s while slice s+1 arrives: (S + 1) x 100/S us
    nodes = [Node(f"n{i}", "compute", i) for i in range(3)]
    topo = Topology("chain", nodes, duplex("n0", "n1", 10) + duplex("n1", "n2", 10))
    b = PlanBuilder("broadcast", 3, root=0)
    down01, up10 = b.channel_pair(0, 1)
    down12, up21 = b.channel_pair(1, 2)
    w0, w1, w2 = b.worker(0), b.worker(1), b.worker(2)
    b.copy(0, w0, ("input", 0), ("output", 0))
    b.signal(1, w1, up10)
    b.signal(2, w2, up21)
    b.wait(0, w0, down01)
    b.put_signal(0, w0, down01, ("input", 0), ("output", 0))
    b.wait(1, w1, down12)
    b.wait(1, w1, up10)
    b.put_signal(1, w1, down12, ("output", 0), ("output", 0))
    b.wait(2, w2, up21)
    for slices, expected in ((1, 200.0), (4, 125.0), (10, 110.0)):
        plan = b.build(generator="test", max_slices=slices)
        result = simulate(plan, topo, MB)
        assert result.slices == slices
        assert result.time_us == pytest.approx(expected)


def test_local_copies_cost_memory_bandwidth():
    # in-place sendrecv lands in scratch, then copies: + 1 MB at 50 GB/s = 20 us
    plan = reference.ring_sendrecv(2, in_place=True)
    assert simulate(plan, pair(10), MB).time_us == pytest.approx(100.0)
    assert simulate(plan, pair(10), MB, mem_bw=50).time_us == pytest.approx(120.0)


def test_recorded_routes_are_used():
    # a fast direct link and a slow detour through a switch: the recorded route wins
    nodes = [Node("a", "compute", 0), Node("b", "compute", 1), Node("s", "switch")]
    topo = Topology("two-paths", nodes, duplex("a", "b", 100) + duplex("a", "s", 10)
                    + duplex("s", "b", 10))
    plan = reference.ring_sendrecv(2)
    assert simulate(plan, topo, MB).time_us == pytest.approx(10.0)
    plan["provenance"]["params"] = {"routes": [["a", "s", "b"], ["b", "s", "a"]],
                                    "channel_routes": [[0], [1]]}
    assert simulate(plan, topo, MB).time_us == pytest.approx(100.0)
    plan["provenance"]["params"]["routes"][0] = ["a", "b", "s"]
    with pytest.raises(SimulationError, match="does not join"):
        simulate(plan, topo, MB)


@pytest.mark.parametrize("routes, channel_routes, message", [
    ([["a", "s", "b"], ["b", "s", "a"]], [[1000000], [1]], r"channel_routes\[0\]\[0\] is 1000000"),
    ([[], ["b", "s", "a"]], [[0], [1]], r"routes\[0\] is \[\]"),
    ([["a", "s", "b"], "b s a"], [[0], [1]], r"routes\[1\] is 'b s a'"),
    ([["a", "s", "b"], ["b", 7, "a"]], [[0], [1]], r"routes\[1\] is"),
    ([["a", "s", "b"], ["b", "s", "a"]], [["x"], [1]], r"channel_routes\[0\]\[0\] is 'x'"),
    ({"0": ["a", "b"]}, [[0], [1]], "must be lists"),
    ([["a", "s", "b"], ["b", "s", "a"]], {"0": 0}, "must be lists"),
    ([["a", "q", "b"], ["b", "s", "a"]], [[0], [1]], "not a link"),
])
def test_malformed_recorded_routes_are_simulation_errors(routes, channel_routes, message):
    # the provenance is free-form: before, these were IndexError, TypeError or KeyError tracebacks
    nodes = [Node("a", "compute", 0), Node("b", "compute", 1), Node("s", "switch")]
    topo = Topology("two-paths", nodes, duplex("a", "b", 100) + duplex("a", "s", 10)
                    + duplex("s", "b", 10))
    plan = reference.ring_sendrecv(2)
    plan["provenance"]["params"] = {"routes": routes, "channel_routes": channel_routes}
    with pytest.raises(SimulationError, match=message):
        simulate(plan, topo, MB)


def test_ranks_do_not_forward_unless_nothing_else_connects():
    # a line of three ranks: 0 and 2 are joined only through rank 1, which the notes say
    nodes = [Node(f"n{i}", "compute", i) for i in range(3)]
    topo = Topology("line", nodes, duplex("n0", "n1", 10) + duplex("n1", "n2", 10))
    result = simulate(reference.ring_all_gather(3), topo, 3 * MB)
    assert any("routed through n1" in note for note in result.notes)


def test_errors():
    with pytest.raises(SimulationError, match="3 ranks"):
        simulate(reference.ring_all_gather(3), pair(), MB)
    b = PlanBuilder("barrier", 2)  # rank 1 waits for a signal rank 0 never sends
    ch0, ch1 = b.channel_pair(0, 1)
    w0, w1 = b.worker(0), b.worker(1)
    b.wait(0, w0, ch0)
    b.signal(1, w1, ch1)
    b.wait(1, w1, ch1)
    with pytest.raises(SimulationError, match="deadlocks"):
        simulate(b.build(generator="test"), pair(), 0)


def test_bus_factors_follow_nccl_tests():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 8) == bus_factor("reduce_scatter", 8) == pytest.approx(7 / 8)
    assert bus_factor("broadcast", 8) == 1.0


# ---- forests and baselines on presets -----------------------------------------------------------
GB = 1 << 30


@pytest.mark.parametrize("name, collective, k, fraction", [
    ("dgx-a100x1", "all_gather", None, 0.99),
    ("dgx-a100x1", "all_reduce", None, 0.99),
    ("dgx-a100x2", "all_gather", 1, 0.97),
    ("dgx-a100x2", "all_reduce", 1, 0.97),
    ("dgx-a100x2", "all_gather", None, 0.85),  # k=13: many small transfers share every link
    ("torus-4x4", "all_gather", None, 0.88),
])
def test_forest_approaches_the_bound(name, collective, k, fraction):
    topo = topology.preset(name)
    plan, _ = forest_plan(topo, collective, k)
    bound = float(throughput_bound(topo, collective)[0])
    result = simulate(plan, topo, GB)
    assert fraction * bound <= result.algbw <= bound * (1 + 1e-9)
    # small messages are latency-bound: far below, never above
    assert simulate(plan, topo, 1 << 20).algbw < result.algbw


@pytest.mark.parametrize("name", ["dgx-a100x1", "dgx-a100x2", "torus-4x4", "mi250x1"])
def test_no_plan_beats_the_bound(name):
    topo = topology.preset(name)
    for collective in ("all_gather", "all_reduce"):
        bound = float(throughput_bound(topo, collective)[0])
        plans = [ring_plan(topo, collective)]
        if collective == "all_reduce":
            plans.append(double_binary_tree_plan(topo))
        if name == "dgx-a100x2":
            plans.append(hierarchical_plan(topo, collective))
        for plan in plans:
            assert simulate(plan, topo, GB).algbw <= bound * (1 + 1e-9), plan["name"]


def test_forest_beats_the_ring_where_rings_cannot_use_the_links():
    topo = topology.preset("dgx-a100x2")
    forest, _ = forest_plan(topo, "all_gather", 1)
    ring = ring_plan(topo, "all_gather")
    assert simulate(forest, topo, GB).algbw > 1.5 * simulate(ring, topo, GB).algbw


# ---- commands -----------------------------------------------------------------------------------
def test_simulate_command(tmp_path, capsys):
    path = tmp_path / "ring.json"
    save(reference.ring_all_gather(8), path)
    assert plan_main(["simulate", str(path), "--topology", "dgx-a100x1", "--size", "1M,64M",
                      "--size", "1G"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")]
    assert [int(ln.split()[0]) for ln in lines] == [1 << 20, 1 << 26, 1 << 30]
    assert float(lines[-1].split()[3]) == pytest.approx(342.0, rel=0.01)  # algbw
    assert plan_main(["simulate", str(path), "--topology", "dgx-a100x1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["size"] == 1 << 30 and row["busbw"] == pytest.approx(row["algbw"] * 7 / 8)


def test_simulate_command_errors(tmp_path, capsys):
    path = tmp_path / "ring.json"
    save(reference.ring_all_gather(3), path)
    assert plan_main(["simulate", str(path), "--topology", "dgx-a100x1"]) == 2
    assert "3 ranks" in capsys.readouterr().err
    assert plan_main(["simulate", str(tmp_path / "none.json"), "--topology", "dgx-a100x1"]) == 2
    assert plan_main(["simulate", str(path), "--topology", "no-such-preset"]) == 2
    assert plan_main(["simulate", str(path), "--topology", "torus-4x4", "--size", "1Q"]) == 2


def test_report_command(tmp_path, capsys):
    import matplotlib  # noqa: F401 - the test extra installs it
    png = tmp_path / "report.png"
    assert plan_main(["report", "--topology", "dgx-a100x1", "--collective", "all_reduce",
                      "--min", "1M", "--max", "4M", "-o", str(png)]) == 0
    out = capsys.readouterr().out
    header = next(ln for ln in out.splitlines() if "size (B)" in ln)
    assert header.split()[3:] == ["forest", "ring", "tree", "hierarchical", "bound"]
    rows = [ln.split() for ln in out.splitlines() if not ln.startswith("#")]
    assert [int(r[0]) for r in rows] == [1 << 20, 1 << 21, 1 << 22]
    assert all(r[4] == "n/a" and float(r[5]) == pytest.approx(171.43, abs=0.01) for r in rows)
    assert "hierarchical: n/a" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plan_main(["report", "--topology", "dgx-a100x1", "--min", "4M", "--max", "1M"]) == 2
