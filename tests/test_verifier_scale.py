"""The verifier at scale (plan/clocks.py): sparse vector clocks, each rank's keeping only the
components that access memory its own components access. The projection must never hide an issue (it can only drop orderings, so it may
over-report, and verify() then re-checks with full clocks); large forest plans must verify with
the projection alone, and a bug planted in one (a lost signal, a race, a wrong offset, an access
before the peer entered) must still be caught by it."""
from __future__ import annotations

import copy
import functools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_mutations import mutate

from forestcc.algorithms.forest_plan import forest_plan
from forestcc.plan import builtin, ops, reference, verify
from forestcc.plan import verifier as v
from forestcc.plan.clocks import Components
from forestcc.topology.presets import a100_fat_tree

IN, OUT, SCR = ops.INPUT, ops.OUTPUT, ops.SCRATCH


def _projected(plan):
    """The projected pass alone, without verify()'s re-check."""
    return v._Verifier(plan, "plan", project=True).run()


def _full(plan):
    return v._Verifier(plan, "plan", project=False).run()


# ----------------------------------------------------------------------------- soundness

def _small_plans():
    plans = [reference.reference_plan(c, n, ip, root=n - 1)
             for c in ops.COLLECTIVES for n in (2, 3, 5) for ip in (False, True)]
    plans += [builtin.generate(a, c, n, **({"root": 1} if c in ops.ROOTED_COLLECTIVES else {}))
              for a in ("ring", "bruck", "halving_doubling", "direct")
              for c in builtin.algorithms()[a] for n in (3, 4)]
    return plans


SMALL = _small_plans()


@settings(max_examples=150, deadline=None)
@given(index=st.integers(0, len(SMALL) - 1), seed=st.integers(0, 2**32 - 1))
def test_projection_never_hides_an_issue(index, seed):
    mutant, _ = mutate(SMALL[index], random.Random(seed))
    if mutant is None or v.plan_format.validation_errors(mutant):
        return
    projected, full = _projected(mutant), _full(mutant)
    assert {str(i) for i in full.issues} <= {str(i) for i in projected.issues}
    # and verify(), projecting even these small plans, reports exactly what full clocks find
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(v, "_PROJECT_ABOVE_COMPONENTS", 0)
        checked = verify(mutant, validated=True)
    assert [str(i) for i in checked.issues] == [str(i) for i in full.issues]


def test_over_reports_are_rechecked_with_full_clocks(monkeypatch):
    # In-place ring all_reduce: rank r overwrites a chunk of rank r+1 that rank r+1 read earlier;
    # rank r learns of that read only around the ring, through ranks that do not touch the
    # chunk. The projection drops that ordering; verify() must not report it.
    plan = reference.ring_all_reduce(5, in_place=True)
    assert v.RACE in _projected(plan).kinds()
    assert _full(plan).ok
    monkeypatch.setattr(v, "_PROJECT_ABOVE_COMPONENTS", 0)  # project even this small plan
    assert verify(plan).ok


def test_small_plans_use_full_clocks_large_ones_the_projection():
    assert not v._Verifier(reference.ring_all_reduce(5), "p").comps.project
    assert v._Verifier(_forest("all_gather"), "p").comps.project


# ----------------------------------------------------------------------------- forest plans

@functools.lru_cache(maxsize=None)
def _forest(collective: str, boxes: int = 16):
    """A 128-rank forest plan (16 DGX-A100 boxes on a fat tree): tens of thousands of ops."""
    return forest_plan(a100_fat_tree(boxes, min(16, boxes)), collective)[0]


def _ops(plan, names):
    return [(r, w, s) for r, entry in enumerate(plan["ranks"])
            for w, worker in enumerate(entry["workers"])
            for s, op in enumerate(worker["ops"]) if op["op"] in names]


@pytest.mark.parametrize("collective", ["all_gather", "all_reduce"])
def test_large_forest_plan_verifies_with_the_projection_alone(collective):
    plan = _forest(collective)
    assert plan["nranks"] == 128
    result = _projected(plan)
    assert result.ok, str(result)
    assert result.ops_executed == sum(len(w["ops"]) for e in plan["ranks"] for w in e["workers"])


def test_large_forest_plan_lost_signal_is_caught():
    plan = copy.deepcopy(_forest("all_gather"))
    r, w, s = [p for p in _ops(plan, {ops.PUT_SIGNAL}) if p[0] == 77][0]
    plan["ranks"][r]["workers"][w]["ops"][s]["op"] = ops.PUT  # the data goes, the signal not
    result = _projected(plan)
    assert v.DEADLOCK in result.kinds() and v.UNBALANCED in result.kinds()
    assert any(i.kind == v.DEADLOCK and "peer rank 77" in i.message for i in result.issues)


def test_large_forest_plan_race_is_caught():
    # A second worker of rank 90 repeats one of its puts over a new channel pair, with no
    # signal or wait: a race with the original put, before the peer entered.
    plan = copy.deepcopy(_forest("all_gather"))
    r, w, s = [p for p in _ops(plan, {ops.PUT_SIGNAL}) if p[0] == 90][-1]
    op = plan["ranks"][r]["workers"][w]["ops"][s]
    peer = plan["ranks"][r]["channels"][op["ch"]]["peer"]
    for rank, other in ((r, peer), (peer, r)):
        channels = plan["ranks"][rank]["channels"]
        channels.append({"id": len(channels), "peer": other, "transport": "auto"})
    workers = plan["ranks"][r]["workers"]
    workers.append({"id": len(workers), "ops": [
        {"op": ops.PUT, "ch": len(plan["ranks"][r]["channels"]) - 1, "src": op["src"],
         "dst": op["dst"]}]})
    for result in (_projected(plan), verify(plan)):
        assert {v.RACE, v.EARLY} <= result.kinds(), str(result)
        assert any(i.kind == v.RACE and f"rank {r}, worker {len(workers) - 1}, step 0 (put)"
                   in i.message for i in result.issues)


def test_large_forest_plan_wrong_offset_is_caught():
    # A child's partial sums land in a sibling's slot of the parent's scratch: two lanes write
    # the same chunk unordered, and the parent sums one contribution twice.
    plan = copy.deepcopy(_forest("all_reduce"))
    puts = {}
    for r, w, s in _ops(plan, {ops.REDUCE_PUT, ops.PUT}):
        op = plan["ranks"][r]["workers"][w]["ops"][s]
        remote = op.get("remote", op.get("dst"))
        if remote[0] == SCR:
            peer = plan["ranks"][r]["channels"][op["ch"]]["peer"]
            puts.setdefault((peer, remote[1] % plan["chunks_per_block"]), []).append((r, remote))
    (parent, _part), writers = next((key, ws) for key, ws in sorted(puts.items())
                                    if len({r for r, _ in ws}) >= 2)
    (_, first), (_, second) = writers[0], next(x for x in writers if x[0] != writers[0][0])
    second[1] = first[1]
    result = _projected(plan)
    assert v.RACE in result.kinds() and v.WRONG_RESULT in result.kinds(), str(result)
    assert not verify(plan).ok


def test_large_forest_plan_access_before_entry_is_caught():
    # Rank 40's entry wait on one of its workers moved after that worker's first put.
    plan = copy.deepcopy(_forest("all_gather"))
    for w, worker in enumerate(plan["ranks"][40]["workers"]):
        op_list = worker["ops"]
        first_put = next((i for i, op in enumerate(op_list) if op["op"] == ops.PUT_SIGNAL), None)
        if first_put is not None and first_put > 0 and op_list[first_put - 1]["op"] == ops.WAIT:
            entry = op_list.pop(first_put - 1)
            op_list.insert(first_put, entry)
            break
    else:
        raise AssertionError("no entry wait before a put on rank 40")
    result = _projected(plan)
    assert v.EARLY in result.kinds(), str(result)
    assert any(i.kind == v.EARLY and i.rank == 40 for i in result.issues)
    assert v.EARLY in verify(plan).kinds()


# --------------------------------------------------------------- large all_reduce reductions

def _reductions_with_scratch(plan, least: int):
    """(rank, worker, step) of the reductions summing at least `least` partial sums from scratch."""
    return [(r, w, s) for r, w, s in _ops(plan, {ops.REDUCE_OP, ops.REDUCE_PUT})
            if sum(ref[0] == SCR for ref in plan["ranks"][r]["workers"][w]["ops"][s]["srcs"])
            >= least]


def test_large_all_reduce_plan_partial_sum_left_out_is_caught():
    # 256 ranks: every output chunk is a 256-term sum, reduced up trees of depth 3. One child's
    # partial sum left out of its parent's reduction: that chunk misses the child's subtree on
    # every rank, found by the projection alone.
    plan = forest_plan(a100_fat_tree(32, 16), "all_reduce")[0]  # its own: mutated in place
    candidates = _reductions_with_scratch(plan, 2)
    r, w, s = candidates[len(candidates) // 2]
    dropped = plan["ranks"][r]["workers"][w]["ops"][s]["srcs"].pop(1)
    assert dropped[0] == SCR
    result = verify(plan)  # projected (a wrong result needs no re-check with full clocks)
    assert result.kinds() == {v.WRONG_RESULT}, str(result)
    assert len(result.issues) == 256  # the one chunk, on every rank
    assert "256 terms" in result.issues[0].message


def test_large_all_reduce_plan_reduction_before_its_waits_is_caught():
    # A folded reduction of children's partial sums (a rank with more children than one op
    # sums) moved before its worker's waits: its reads of the children's slots are not ordered
    # after their puts (a race, or a read of a slot not written yet). 128 ranks: the full-clock
    # re-check that verify() makes of a race stays quick.
    plan = copy.deepcopy(_forest("all_reduce"))
    r, w, s = next((r, w, s) for r, w, s in _reductions_with_scratch(plan, 2)
                   if plan["ranks"][r]["workers"][w]["ops"][s]["op"] == ops.REDUCE_OP)
    op_list = plan["ranks"][r]["workers"][w]["ops"]
    op_list.insert(0, op_list.pop(s))
    for result in (_projected(plan), verify(plan)):
        assert any(i.kind in (v.RACE, v.UNINITIALIZED) and (i.rank, i.worker, i.step) == (r, w, 0)
                   for i in result.issues), str(result)


def test_large_all_reduce_plan_missing_wait_is_caught():
    # 128 ranks: a worker of the up phase no longer waits for a child's partial sum before it
    # reduces it. Its read of that scratch slot is not ordered after the child's put: found by
    # the projection alone (a race, or a read of a slot not written yet) at that worker.
    plan = copy.deepcopy(_forest("all_reduce"))
    def waits_for_a_child(r, w, s):  # not the entry wait before the first put to the parent
        op_list, peers = plan["ranks"][r]["workers"][w]["ops"], plan["ranks"][r]["channels"]
        return (s >= 1 and op_list[s - 1]["op"] == ops.WAIT
                and peers[op_list[s - 1]["ch"]]["peer"] != peers[op_list[s].get("ch", 0)]["peer"])

    r, w, s = next(p for p in _reductions_with_scratch(plan, 1) if waits_for_a_child(*p))
    del plan["ranks"][r]["workers"][w]["ops"][s - 1]
    for result in (_projected(plan), verify(plan)):
        assert v.UNBALANCED in result.kinds(), str(result)
        assert any(i.kind in (v.RACE, v.UNINITIALIZED) and (i.rank, i.worker) == (r, w)
                   and "scratch" in i.message for i in result.issues), str(result)


def test_large_all_reduce_plan_wrong_source_is_caught():
    # 128 ranks: one put of the down phase sends the rank's own input instead of the chunk's
    # sum; the subtree below it ends with that rank's input in that chunk.
    plan = copy.deepcopy(_forest("all_reduce"))
    r, w, s = next((r, w, s) for r, w, s in _ops(plan, {ops.PUT_SIGNAL})
                   if plan["ranks"][r]["workers"][w]["ops"][s]["src"][0] == OUT)
    op = plan["ranks"][r]["workers"][w]["ops"][s]
    op["src"] = [IN, op["src"][1]]
    result = _projected(plan)
    assert result.kinds() == {v.WRONG_RESULT}, str(result)
    assert all("expected" in i.message for i in result.issues)
    assert verify(plan).kinds() == {v.WRONG_RESULT}


# ------------------------------------------------------------ what each rank's clocks keep

def _co_access_by_python(plan, comps):
    """The rule of _C.plan.co_access written out in Python, for small plans."""
    from forestcc.plan import geometry
    n, k = plan["nranks"], plan["chunks_per_block"]
    alias = [geometry.alias_function(plan["collective"], plan["in_place"], r, k) for r in range(n)]
    accessors: dict = {}

    def touch(comp, rank, ref, count):
        for i in range(ref[1], ref[1] + count):
            accessors.setdefault((rank,) + alias[rank](ref[0], i), set()).add(comp)

    rank_of = {}
    for r, entry in enumerate(plan["ranks"]):
        peer = [c["peer"] for c in entry["channels"]]
        for comp in list(comps.worker_comp[r]) + list(comps.lane_comp[r]):
            rank_of[comp] = r
        for w, worker in enumerate(entry["workers"]):
            wc = comps.worker_comp[r][w]
            for op in worker["ops"]:
                name, count = op["op"], ops.op_count(op)
                lane = comps.lane_comp[r][op["ch"]] if "ch" in op else None
                if name in (ops.PUT, ops.PUT_SIGNAL):
                    touch(lane, r, op["src"], count)
                    touch(lane, peer[op["ch"]], op["dst"], count)
                elif name == ops.GET:
                    touch(lane, peer[op["ch"]], op["src"], count)
                    touch(lane, r, op["dst"], count)
                elif name == ops.COPY:
                    touch(wc, r, op["src"], count)
                    touch(wc, r, op["dst"], count)
                elif name in (ops.REDUCE_OP, ops.REDUCE_PUT, ops.GET_REDUCE):
                    for ref in [op["dst"]] + op["srcs"]:
                        touch(wc, r, ref, count)
                    if name == ops.REDUCE_PUT:
                        touch(lane, r, op["dst"], count)
                        touch(lane, peer[op["ch"]], op["remote"], count)
                    elif name == ops.GET_REDUCE:
                        touch(wc, peer[op["ch"]], op["src"], count)
    kept = [set() for _ in range(n)]
    for key, comps_here in accessors.items():
        for r in {key[0]} | {rank_of[c] for c in comps_here}:
            kept[r] |= comps_here | {comps.entered[key[0]]}
    return kept


CO_ACCESS_PLANS = SMALL[::3] + [builtin.generate("eager", c, 4)
                                 for c in builtin.algorithms()["eager"]]


@pytest.mark.parametrize("index", range(len(CO_ACCESS_PLANS)))
def test_co_access_follows_its_rule(index):
    # The C++ scan (_C.plan.co_access) against the rule written out, on reference plans of
    # every collective, in and out of place (aliased buffers), and built-in plans, eager ones
    # (scratch_banks 2) included. Barrier and eager plans keep every entered mark besides
    # (clocks.py: their rule is global).
    plan = CO_ACCESS_PLANS[index]
    comps = Components(plan, project=True)
    expected = _co_access_by_python(plan, comps)
    if plan["collective"] == ops.BARRIER or plan.get("scratch_banks", 1) == 2:
        expected = [kept | set(comps.entered) for kept in expected]
    assert [comps.kept.components(r) for r in range(plan["nranks"])] == expected
    assert all(comps.keeps(r, c) == (c in expected[r])
               for r in range(plan["nranks"]) for c in range(comps.count))


def test_co_access_covers_barrier_and_eager_plans():
    kinds = {(p["collective"] == ops.BARRIER, p.get("scratch_banks", 1) == 2)
             for p in CO_ACCESS_PLANS}
    assert {(True, False), (False, True)} <= kinds


def test_a_forest_rank_keeps_few_components():
    # What the projection is for: a 128-rank forest all_reduce rank keeps a few hundred of the
    # plan's tens of thousands of components.
    comps = Components(_forest("all_reduce"), project=True)
    assert comps.count > 20_000
    assert max(comps.kept.count(r) for r in range(len(comps.kept))) < 1_000


# ----------------------------------------------------------------------------- the clock join

@settings(max_examples=200, deadline=None)
@given(clock=st.dictionaries(st.integers(0, 30), st.integers(1, 9)),
       changes=st.lists(st.tuples(st.integers(0, 30), st.integers(1, 9))),
       kept=st.sets(st.integers(0, 30)), project=st.booleans(), start=st.integers(0, 40))
def test_clock_join_takes_what_raises_the_clock_and_is_kept(clock, changes, kept, project, start):
    # The C++ joins (_C.plan.join_clock_replayed, join_clock_log) against the rule written out:
    # an entry is taken when it raises the clock and, projecting, when the clock's rank keeps the
    # component. `changes` is another clock's change log (values only grow there); replayed, it
    # is that clock: each component in the order it first appears, at its last value.
    from forestcc import _C
    other: dict = {}
    log: list = []
    for comp, value in changes:  # a clock logs each raise
        if value > other.get(comp, 0):
            other[comp] = value
            log += [comp, value]
    start = min(start - start % 2, len(log))
    kept_by = _C.plan.KeptComponents([[], sorted(kept)]) if project else None
    for items, join in (
            (list(other.items()),
             lambda c, ch: _C.plan.join_clock_replayed(c, log, len(log), kept_by, 1, ch)),
            (list(zip(log[start::2], log[start + 1::2])),
             lambda c, ch: _C.plan.join_clock_log(c, log, start, len(log), kept_by, 1, ch))):
        expected, changed_expected = dict(clock), []
        for comp, value in items:
            if value > expected.get(comp, 0) and (not project or comp in kept):
                expected[comp] = value
                changed_expected += [comp, value]
        got, changed = dict(clock), []
        join(got, changed)
        assert (got, changed) == (expected, changed_expected)


def test_kept_components_name_a_rank_out_of_range():
    from forestcc import _C
    kept = _C.plan.KeptComponents([[1, 5], [2]])
    assert kept.keeps(0, 5) and not kept.keeps(1, 5) and kept.count(1) == 1
    for ask in (lambda: kept.keeps(2, 1), lambda: kept.components(7)):
        with pytest.raises(IndexError, match="rank [27] is out of range \\(2 ranks\\)"):
            ask()
