"""The native event loop (cpp/src/sim/) against the Python reference (simulator_reference.py).

Both run the model of forestcc.plan.simulator on the same input, so they must agree exactly: the
same time to the last bit and the same transfer count, on every built-in generator's plans, on
presets and on odd rank counts, with and without memory bandwidth, at sizes that split chunks
unevenly. The native loop's input checks and deadlock report are tested here too."""
from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

import pytest

from forestcc import _C, topology
from forestcc.algorithms.baselines import double_binary_tree_plan, hierarchical_plan, ring_plan
from forestcc.algorithms.forest_plan import forest_plan
from forestcc.plan import PlanBuilder, reference
from forestcc.plan.simulator import SimulationError, simulate
from forestcc.topology import Link, Node, Topology

# (size, mem_bw GB/s): an odd size makes chunks of q and q + 1 elements and uneven slices.
CASES = ((1 << 20, None), (12_345_679, 150.0))


def star(nranks, bandwidth=25, latency=1):
    nodes = [Node(f"r{i}", "compute", i) for i in range(nranks)] + [Node("s", "switch")]
    links = []
    for i in range(nranks):
        links += [Link(f"r{i}", "s", Fraction(bandwidth + i), Fraction(latency)),
                  Link("s", f"r{i}", Fraction(bandwidth + i), Fraction(latency))]
    return Topology(f"star{nranks}", nodes, links)


def assert_same(plan, topo):
    for size, mem_bw in CASES:
        native = simulate(plan, topo, size, mem_bw=mem_bw)
        python = simulate(plan, topo, size, mem_bw=mem_bw, engine="python")
        where = f"{plan['name']} on {topo.name}, {size} B, mem_bw {mem_bw}"
        assert native.time_us == python.time_us, where
        assert native.transfers == python.transfers > 0, where
        assert native.slices == python.slices and native.notes == python.notes, where


def _preset_plans(name):
    topo = topology.preset(name)
    for collective in ("all_gather", "reduce_scatter", "all_reduce"):
        for k in (None, 1):
            yield topo, forest_plan(topo, collective, k)[0]
        yield topo, ring_plan(topo, collective)
        try:
            yield topo, hierarchical_plan(topo, collective)
        except ValueError:
            pass
    yield topo, double_binary_tree_plan(topo)


@pytest.mark.parametrize("name", ["dgx-a100x1", "dgx-a100x2", "torus-4x4", "mi250x1"])
def test_native_equals_reference_on_presets(name):
    for topo, plan in _preset_plans(name):
        assert_same(plan, topo)


@pytest.mark.parametrize("nranks", [3, 5, 7])
def test_native_equals_reference_on_odd_rank_counts(nranks):
    topo = star(nranks)
    for collective in ("all_gather", "reduce_scatter", "all_reduce"):
        assert_same(reference.reference_plan(collective, nranks), topo)
        assert_same(forest_plan(topo, collective)[0], topo)
        assert_same(ring_plan(topo, collective), topo)
    assert_same(double_binary_tree_plan(topo), topo)
    for collective in ("all_to_all", "broadcast", "reduce", "gather", "scatter"):
        assert_same(reference.reference_plan(collective, nranks), topo)


def test_native_equals_reference_when_events_tie():
    # No latency and equal links: many events fall on the same time, where the order is by kind
    # and then push order (the event queue's same-time heap); signals queue up per channel.
    nodes = [Node(f"r{i}", "compute", i) for i in range(5)] + [Node("s", "switch")]
    links = [Link(a, b, Fraction(25), Fraction(0)) for i in range(5)
             for a, b in ((f"r{i}", "s"), ("s", f"r{i}"))]
    topo = Topology("flat5", nodes, links)
    for collective in ("all_gather", "reduce_scatter", "all_reduce"):
        assert_same(forest_plan(topo, collective)[0], topo)
        assert_same(ring_plan(topo, collective), topo)
        assert_same(reference.reference_plan(collective, 5), topo)


# One put of 12,000 B over a 1,000 GB/s link once a 700 us entry signal is in: the link's event
# falls at 700.012 us, where (event - start) x bandwidth leaves the transfer 5.6e-8 B short,
# beyond the rounding allowance, but the 5.6e-14 us that would take are below the clock's
# resolution at 700 us, so the event came due at the same time again and again. Run in a child
# process so that a loop that never ends fails the test instead of hanging it.
_TINY_REMAINDER = """
import json
from fractions import Fraction
from forestcc.plan import reference
from forestcc.plan.simulator import simulate
from forestcc.topology import Link, Node, Topology
topo = Topology("pair", [Node("a", "compute", 0), Node("b", "compute", 1)],
                [Link("a", "b", Fraction(1000), Fraction(700)),
                 Link("b", "a", Fraction(1000), Fraction(700))])
print(json.dumps([(r.time_us, r.transfers) for r in
                  (simulate(reference.ring_sendrecv(2), topo, 12_000, engine=engine)
                   for engine in ("native", "python"))]))
"""


def test_a_remainder_below_the_clock_resolution_ends_the_transfer():
    try:
        out = subprocess.run([sys.executable, "-c", _TINY_REMAINDER], capture_output=True,
                             text=True, timeout=120, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail("the simulation did not end: a link event keeps falling due at the same time")
    native, python = json.loads(out.stdout)
    assert native == python  # to the last bit
    # entry signal (700 us), 12,000 B at 1,000 bytes per ns (0.012 us), arrival (700 us)
    assert native[0] == pytest.approx(1400.012, abs=1e-9) and native[1] == 2


def test_native_loop_reports_the_same_deadlock():
    b = PlanBuilder("barrier", 3)
    for r in range(3):  # everyone waits on its right neighbour; nobody signals
        mine, _ = b.channel_pair(r, (r + 1) % 3)
        b.wait(r, b.worker(r), mine)
    plan = b.build(generator="test")
    messages = []
    for engine in ("native", "python"):
        with pytest.raises(SimulationError, match="deadlocks") as err:
            simulate(plan, star(3), 1 << 20, engine=engine)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "rank 0 worker 0 at step 0 of slice 0" in messages[0]


def test_native_loop_checks_its_input():
    # one worker puts chunk 0 of 1 (count 2 elements, so 8 bytes) over one link
    good = dict(link_bandwidth=[1.0], channel_link_start=[0, 1, 1], channel_links=[0],
                channel_latency=[0.0, 0.0], partner=[1, 0], worker_op_start=[0, 1],
                ops=[2, 0, 0, 1, 1, 0], count=2, chunks_per_block=1, small_bytes=[8],
                big_bytes=[12], mem_bandwidth=0.0)
    time_us, transfers, stuck = _C.simulate_events(**good)
    assert (time_us, transfers, stuck) == (8.0, 1, [])  # 8 bytes at 1 byte per microsecond
    bad = [({"channel_links": [1]}, "link id 1 out of range"),
           ({"partner": [1, 2]}, "partner channel 2 out of range"),
           ({"ops": [2, 5, 0, 1, 1, 0]}, "op channel 5 out of range"),
           ({"ops": [9, 0, 0, 1, 1, 0]}, "op kind 9"),
           ({"ops": [2, 0, 0, -1, 1, 0]}, "op chunks and multiplier"),
           ({"chunks_per_block": 0}, "chunks per block >= 1"),
           ({"worker_op_start": [0, 2]}, "worker op offsets"),
           ({"channel_link_start": [0, 1]}, "channel count"),
           ({"link_bandwidth": [0.0]}, "bandwidth is not positive"),
           ({"big_bytes": []}, "per-slice byte tables")]
    for change, message in bad:
        with pytest.raises(ValueError, match=message):
            _C.simulate_events(**{**good, **change})


def test_unknown_engine_is_refused():
    with pytest.raises(ValueError, match="engine must be 'native' or 'python'"):
        simulate(reference.ring_all_gather(3), star(3), 1 << 20, engine="fast")
