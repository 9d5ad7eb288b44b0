"""The plan verifier: correct plans pass; every kind of broken plan is caught and located."""
from __future__ import annotations

import copy
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from forestcc.plan import PlanBuilder, PlanError, ops, proof, reference, save, verify
from forestcc.plan import verifier as v
from forestcc.plan.cli import build_parser, plan_main, verify_main
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_mutations import (check_added_conflicting_put, check_dropped_signal,
                            check_dropped_wait, check_wrong_chunk_index)
from plan_mutations import ops_positions as _ops_positions

IN, OUT, SCR = ops.INPUT, ops.OUTPUT, ops.SCRATCH


@pytest.fixture(autouse=True)
def private_proof_cache(tmp_path, monkeypatch):
    """`plan verify` and load_proven record proofs: here in the test's own directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(proof, "_seen", {})


# ----------------------------------------------------------------------------- correct plans

@pytest.mark.parametrize("collective", ops.COLLECTIVES)
@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
def test_reference_plans_verify_for_1_to_16_ranks(collective, in_place):
    for nranks in range(1, 17):
        for root in sorted({0, nranks - 1, nranks // 2}):
            plan = reference.reference_plan(collective, nranks, in_place, root=root)
            result = verify(plan)
            assert result.ok, str(result)
            if collective not in ops.ROOTED_COLLECTIVES:
                break


@pytest.mark.parametrize("nranks", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("in_place", [False, True])
def test_more_reference_plans(nranks, in_place):
    assert verify(reference.direct_all_gather_get(nranks, in_place)).ok
    assert verify(reference.ring_all_reduce(nranks, in_place, parts=3)).ok
    assert verify(reference.tree_broadcast(nranks, in_place, root=nranks - 1,
                                           chunks_per_block=4)).ok


def test_large_plan_verifies():
    # 16 ranks, thousands of ops: must stay well within seconds (not asserted: no timing in tests)
    plan = reference.ring_all_reduce(16, parts=8)
    assert sum(len(w["ops"]) for e in plan["ranks"] for w in e["workers"]) > 1000
    result = verify(plan)
    assert result.ok and result.ops_executed > 1000
    assert "OK" in str(result)


# ----------------------------------------------------------------------------- mutations

plans = st.builds(
    lambda collective, nranks, in_place, root: reference.reference_plan(
        collective, nranks, in_place, root=root % nranks),
    st.sampled_from([c for c in ops.COLLECTIVES]), st.integers(2, 7), st.booleans(),
    st.integers(0, 6))


@settings(max_examples=80, deadline=None)
@given(plan=plans, data=st.data())
def test_dropped_wait_is_caught(plan, data):
    check_dropped_wait(plan, data)


@settings(max_examples=80, deadline=None)
@given(plan=plans, data=st.data())
def test_dropped_signal_deadlocks(plan, data):
    check_dropped_signal(plan, data)


@settings(max_examples=100, deadline=None)
@given(plan=plans, data=st.data())
def test_wrong_chunk_index_is_caught(plan, data):
    check_wrong_chunk_index(plan, data)


@settings(max_examples=50, deadline=None)
@given(plan=plans, data=st.data())
def test_out_of_range_index_is_invalid(plan, data):
    positions = [p for p in _ops_positions(plan) if any(
        f in plan["ranks"][p[0]]["workers"][p[1]]["ops"][p[2]] for f in ops.REF_FIELDS)]
    if not positions:
        return
    r, w, s = data.draw(st.sampled_from(positions))
    op = plan["ranks"][r]["workers"][w]["ops"][s]
    field = next(f for f in ops.REF_FIELDS if f in op)
    op[field][1] = plan["buffers"][op[field][0]] - op.get("n", 1) + data.draw(st.integers(1, 5))
    result = verify(plan)
    assert result.kinds() == {v.INVALID}
    assert f"rank {r}, worker {w}, step {s}" in str(result)


@settings(max_examples=80, deadline=None)
@given(plan=plans, data=st.data())
def test_added_conflicting_put_races(plan, data):
    """Repeat an existing put from a new, unsynchronized worker over a new channel pair."""
    check_added_conflicting_put(plan, data)


def test_conflicting_puts_from_two_ranks_race():
    plan = reference.direct_all_to_all(4)
    # rank 0, after rank 1 said it entered, also writes rank 1's output block 2, which rank 2
    # fills: nothing orders rank 0's put against rank 2's.
    op_list = plan["ranks"][0]["workers"][0]["ops"]
    channel_to_1 = next(c["id"] for c in plan["ranks"][0]["channels"] if c["peer"] == 1)
    step = next(s for s, op in enumerate(op_list)
                if op["op"] == ops.WAIT and op["ch"] == channel_to_1) + 1
    op_list.insert(step, {"op": ops.PUT, "ch": channel_to_1, "src": [IN, 1], "dst": [OUT, 2]})
    result = verify(plan)
    races = [i for i in result.issues if i.kind == v.RACE]
    assert races and any("rank 1 output chunk 2" in i.message for i in races), str(result)
    assert any((i.rank, i.worker, i.step) == (0, 0, step) or "rank 0, worker 0, step "
               f"{step}" in i.message for i in races)


# ----------------------------------------------------------------------------- memory model

def _two_rank_builder(collective=ops.SENDRECV, **kw):
    b = PlanBuilder(collective, 2, **kw)
    return b, b.worker(0), b.worker(1)


def _sendrecv(flush_before_reuse: bool, overwrite_source: bool):
    """Rank 0 puts to rank 1 and, optionally, reuses the put's source before flushing."""
    b, w0, w1 = _two_rank_builder(in_place=False, scratch=1)
    c01, c10 = b.channel_pair(0, 1)
    for rank, w, ch in ((0, w0, c01), (1, w1, c10)):
        b.signal(rank, w, ch)
        b.wait(rank, w, ch)
        b.copy(rank, w, (IN, 0), (SCR, 0))
        b.put(rank, w, ch, (SCR, 0), (OUT, 0))
        if flush_before_reuse:
            b.flush(rank, w, ch)
        if overwrite_source:
            b.copy(rank, w, (IN, 0), (SCR, 0))
        b.signal(rank, w, ch)
        b.wait(rank, w, ch)
    return b.build()


def test_put_source_reuse_needs_a_flush():
    assert verify(_sendrecv(flush_before_reuse=False, overwrite_source=False)).ok
    result = verify(_sendrecv(flush_before_reuse=False, overwrite_source=True))
    assert v.RACE in result.kinds()
    assert verify(_sendrecv(flush_before_reuse=True, overwrite_source=True)).ok


def _get_all_gather(flush: bool):
    b, w0, w1 = _two_rank_builder(ops.ALL_GATHER)
    c01, c10 = b.channel_pair(0, 1)
    for rank, w, ch in ((0, w0, c01), (1, w1, c10)):
        b.copy(rank, w, (IN, 0), (OUT, rank))
        b.signal(rank, w, ch)
        b.wait(rank, w, ch)
        b.get(rank, w, ch, (IN, 0), (SCR, 0))
        if flush:
            b.flush(rank, w, ch)
        b.copy(rank, w, (SCR, 0), (OUT, 1 - rank))  # reads what the get wrote
        b.signal(rank, w, ch)
        b.wait(rank, w, ch)
    return b.build()


def test_get_destination_is_readable_after_flush():
    assert verify(_get_all_gather(flush=True)).ok
    assert v.RACE in verify(_get_all_gather(flush=False)).kinds()


def _signal_on_other_channel(flush: bool):
    """Rank 0 puts on channel A but signals on channel B: only a flush of A orders the put."""
    b, w0, w1 = _two_rank_builder()
    a0, a1 = b.channel_pair(0, 1)
    b0, b1 = b.channel_pair(0, 1)
    back0, back1 = b.channel_pair(1, 0)
    b.signal(1, w1, back1)
    b.wait(0, w0, back0)
    b.put(0, w0, a0, (IN, 0), (OUT, 0))
    if flush:
        b.flush(0, w0, a0)
    b.signal(0, w0, b0)
    b.wait(1, w1, b1)
    b.copy(1, w1, (OUT, 0), (SCR, 0))  # rank 1 looks at the data
    # rank 1 -> rank 0 data, to make this a complete sendrecv
    b.put_signal(1, w1, back1, (IN, 0), (OUT, 0))
    b.signal(0, w0, back0)
    b.wait(1, w1, back1)
    b.wait(0, w0, back0)
    b.signal(0, w0, a0)
    b.wait(1, w1, a1)
    return b.build()


def test_signal_orders_only_its_own_channel():
    assert verify(_signal_on_other_channel(flush=True)).ok
    result = verify(_signal_on_other_channel(flush=False))
    assert v.RACE in result.kinds(), str(result)


def _loopback(synchronize: bool):
    b = PlanBuilder(ops.ALL_REDUCE, 1, scratch=1)
    producer, consumer = b.worker(0), b.worker(0)
    ch_p, ch_c = b.channel_pair(0, 0)
    b.copy(0, producer, (IN, 0), (SCR, 0))
    if synchronize:
        b.signal(0, producer, ch_p)
        b.wait(0, consumer, ch_c)
    b.copy(0, consumer, (SCR, 0), (OUT, 0))
    return b.build()


def test_loopback_channels_synchronize_workers_of_one_rank():
    assert verify(_loopback(True)).ok
    kinds = verify(_loopback(False)).kinds()
    assert kinds & {v.RACE, v.UNINITIALIZED}


def test_early_access_is_caught():
    b, w0, w1 = _two_rank_builder(ops.SENDRECV)
    c01, c10 = b.channel_pair(0, 1)
    for rank, w, ch in ((0, w0, c01), (1, w1, c10)):
        b.put_signal(rank, w, ch, (IN, 0), (OUT, 0))  # no entry handshake
        b.wait(rank, w, ch)
    result = verify(b.build())
    assert result.kinds() == {v.EARLY}
    assert "before rank 1 is known to have entered" in str(result)


def test_unfinished_put_is_caught():
    b, w0, w1 = _two_rank_builder(ops.SENDRECV)
    c01, c10 = b.channel_pair(0, 1)
    for rank, w, ch in ((0, w0, c01), (1, w1, c10)):
        b.signal(rank, w, ch)
        b.wait(rank, w, ch)
        b.put(rank, w, ch, (IN, 0), (OUT, 0))  # never signalled: may land after the peer returns
    assert v.UNFINISHED in verify(b.build()).kinds()


def _get_reduce_all_reduce(entry=True, exit_signal=True, peer_writes_early=False):
    """2-rank all_reduce by get_reduce (k = 2 parts): rank r reduces part r reading the peer's
    part r in place, then puts it into the peer's output."""
    b = PlanBuilder(ops.ALL_REDUCE, 2, chunks_per_block=2)
    c01, c10 = b.channel_pair(0, 1)
    for r, ch in ((0, c01), (1, c10)):
        w = b.worker(r)
        if peer_writes_early and r == 1:    # writes where rank 0's get_reduce writes, unordered
            b.signal(r, w, ch)
            b.wait(r, w, ch)
            b.put(r, w, ch, (IN, 0), (OUT, 0))
        elif entry:
            b.signal(r, w, ch)
            b.wait(r, w, ch)
        b.get_reduce(r, w, ch, (OUT, r), [(IN, r)], (IN, r))
        b.put(r, w, ch, (OUT, r), (OUT, r))
        if exit_signal:
            b.signal(r, w, ch)
            b.wait(r, w, ch)
    return b.build(validate=False)


def test_get_reduce_reads_the_peer_in_place():
    result = verify(_get_reduce_all_reduce())
    assert result.ok, str(result)
    no_entry = verify(_get_reduce_all_reduce(entry=False))
    assert v.EARLY in no_entry.kinds(), str(no_entry)
    assert "(get_reduce)" in str(no_entry)
    # without the last signal the peer may return while this rank still reads its input
    assert v.UNFINISHED in verify(_get_reduce_all_reduce(exit_signal=False)).kinds()


def test_get_reduce_read_races_with_the_peers_write():
    result = verify(_get_reduce_all_reduce(peer_writes_early=True))
    assert v.RACE in result.kinds(), str(result)
    assert "rank 0, worker 0, step 2 (get_reduce)" in str(result)


def test_input_write_uninitialized_overlap_and_double_count():
    # chunk refs of one op share their part (index mod 2), as validation requires
    b = PlanBuilder(ops.ALL_REDUCE, 1, chunks_per_block=2, scratch=6)
    w = b.worker(0)
    b.copy(0, w, (SCR, 3), (SCR, 1))                  # never-written scratch
    b.copy(0, w, (SCR, 1), (IN, 1))                   # writes the user's input
    b.copy(0, w, (OUT, 1), (SCR, 5))                  # reads never-written output
    b.reduce(0, w, (OUT, 0), [(IN, 0), (IN, 0)])      # counts r0[0] twice
    b.copy(0, w, (IN, 0), (SCR, 0), n=2)
    b.copy(0, w, (SCR, 0), (SCR, 2), n=3)             # partial overlap
    result = verify(b.build())
    kinds = result.kinds()
    assert {v.UNINITIALIZED, v.INPUT_WRITE, v.OVERLAP, v.WRONG_RESULT} <= kinds, str(result)
    assert "rank 0 output chunk 0: expected r0[0], got sum(r0[0], r0[0])" in str(result)


@pytest.mark.parametrize("move", ["put", "get", "put_signal"])
def test_a_loopback_move_with_overlapping_chunks_is_an_overlap(move):
    # the executor moves a loopback put within the rank's memory with memcpy and forward
    # streaming stores; before, the verifier modelled it as memmove and proved a plan whose
    # one-chunk-overlapping shift returned the peer's block in the rank's own slot
    b = PlanBuilder(ops.ALL_GATHER, 2, scratch=3)
    pair = b.channel_pair(0, 1)
    for r in range(2):
        ch, loop, w = pair[r], b.channel_pair(r, r), b.worker(r)
        b.copy(r, w, (IN, 0), (SCR, 1))
        b.signal(r, w, ch)
        b.wait(r, w, ch)
        b.put_signal(r, w, ch, (IN, 0), (SCR, 0))
        b.wait(r, w, ch)
        getattr(b, move)(r, w, loop[0], (SCR, 0), (SCR, 1), n=2)  # scratch 0..2 -> 1..3
        if move == "put_signal":
            b.wait(r, w, loop[1])
        b.flush(r, w, loop[0])
        b.copy(r, w, (SCR, 1), (OUT, 1 - r))
        b.copy(r, w, (SCR, 2), (OUT, r))
        b.signal(r, w, ch)
        b.wait(r, w, ch)
    result = verify(b.build())
    assert v.OVERLAP in result.kinds(), str(result)
    assert f"({move}): source and destination overlap" in str(result), str(result)


def test_in_place_aliasing_is_modelled():
    # in-place all_gather: rank 0's input is its output block 0, so copying it there is a no-op
    # that must not count as a write into the input, and reading output block 0 reads the input
    b = PlanBuilder(ops.ALL_GATHER, 1, in_place=True)
    w = b.worker(0)
    b.copy(0, w, (OUT, 0), (IN, 0))
    assert verify(b.build()).ok
    b = PlanBuilder(ops.ALL_GATHER, 1, in_place=False)
    w = b.worker(0)
    b.copy(0, w, (OUT, 0), (IN, 0))
    assert {v.UNINITIALIZED, v.INPUT_WRITE} <= verify(b.build()).kinds()


def test_barrier_must_connect_every_rank():
    b = PlanBuilder(ops.BARRIER, 3)
    c01, c10 = b.channel_pair(0, 1)
    w0, w1 = b.worker(0), b.worker(1)
    b.worker(2)
    b.signal(0, w0, c01)
    b.wait(1, w1, c10)
    result = verify(b.build())
    assert result.kinds() == {v.NOT_SYNCHRONIZED}
    assert "rank 1 can finish the barrier before rank 2 has started it" in str(result)


def _eager_all_gather(nranks=3, banks=2, skip_wait=None, read_unwritten=False):
    """Eager all_gather: every rank puts its input into every peer's scratch bank at once (no
    entry handshake) and copies the received blocks out. skip_wait=(r, p): p sends r nothing
    and r does not wait for p (r's output then lacks p's block, too); read_unwritten: rank 0
    also copies a bank slot nobody wrote in this call (stale data of an older eager call)."""
    b = PlanBuilder(ops.ALL_GATHER, nranks, scratch=nranks)
    w = [b.worker(r) for r in range(nranks)]
    ch = {}
    for r in range(nranks):
        for p in range(r + 1, nranks):
            ch[r, p], ch[p, r] = b.channel_pair(r, p)
    slot = lambda sender, receiver: sender if sender < receiver else sender - 1  # noqa: E731
    for r in range(nranks):
        for p in range(nranks):
            if p != r and (p, r) != skip_wait:
                b.put_signal(r, w[r], ch[r, p], (IN, 0), (SCR, slot(r, p)))
        b.copy(r, w[r], (IN, 0), (OUT, r))
        for p in range(nranks):
            if p != r and (r, p) != skip_wait:
                b.wait(r, w[r], ch[r, p])
                b.copy(r, w[r], (SCR, slot(p, r)), (OUT, p))
    if read_unwritten:
        b.copy(0, w[0], (SCR, nranks - 1), (SCR, nranks - 1))
    return b.build(validate=False, scratch_banks=banks)


def test_eager_plans_may_write_peer_scratch_banks_before_entry():
    result = verify(_eager_all_gather())
    assert result.ok, str(result)
    # the same plan with ordinary scratch breaks the entry rule at every put
    single = verify(_eager_all_gather(banks=1))
    assert single.kinds() == {v.EARLY}, str(single)


def test_eager_plan_must_synchronize_every_pair():
    # rank 1 never hears from rank 2 in the call: it could run two eager calls ahead and
    # overwrite a bank rank 2 still reads
    result = verify(_eager_all_gather(skip_wait=(1, 2)))
    assert v.NOT_SYNCHRONIZED in result.kinds(), str(result)
    assert ("rank 1 can finish an eager call (scratch_banks 2), and the next one could overwrite "
            "a scratch bank rank 2 still reads before rank 2 has started it") in str(result)


def test_eager_plan_reading_a_stale_bank_slot_is_caught():
    result = verify(_eager_all_gather(read_unwritten=True))
    assert v.UNINITIALIZED in result.kinds(), str(result)


def test_eager_plans_still_need_entry_for_user_buffers():
    # scratch banks exempt the peers' scratch only: putting into a peer's output at once is early
    b = PlanBuilder(ops.ALL_GATHER, 2)
    c01, c10 = b.channel_pair(0, 1)
    for r, ch in ((0, c01), (1, c10)):
        w = b.worker(r)
        b.put_signal(r, w, ch, (IN, 0), (OUT, r))
        b.copy(r, w, (IN, 0), (OUT, r))
        b.wait(r, w, ch)
    result = verify(b.build(validate=False, scratch_banks=2))
    assert result.kinds() == {v.EARLY}, str(result)


def test_deadlock_report_names_the_wait_and_the_peer():
    plan = reference.ring_all_gather(3)
    ops_of_1 = plan["ranks"][1]["workers"][0]["ops"]
    signal_step = next(s for s, op in enumerate(ops_of_1) if op["op"] == ops.SIGNAL)
    del ops_of_1[signal_step]  # rank 1 never says it entered
    result = verify(plan)
    deadlock = next(i for i in result.issues if i.kind == v.DEADLOCK)
    assert deadlock.rank == 0 and deadlock.worker == 0
    assert deadlock.message.startswith(f"rank 0, worker 0, step {deadlock.step} (wait): waits on "
                                       f"channel")
    assert "(peer rank 1) for signal #1 from rank 1 channel" in deadlock.message
    assert "which sent 0" in deadlock.message


def test_invalid_plan_gives_invalid_issues():
    plan = reference.ring_all_gather(3)
    plan["ranks"][2]["workers"][0]["ops"][1]["ch"] = 9
    result = verify(plan)
    assert not result.ok and result.kinds() == {v.INVALID}
    assert result.issues[0].message.startswith("ring_all_gather_3: rank 2, worker 0, step 1")


def test_verification_is_deterministic():
    plan = reference.ring_reduce_scatter(5)
    del plan["ranks"][3]["workers"][0]["ops"][4]
    assert str(verify(plan)) == str(verify(copy.deepcopy(plan)))


# ----------------------------------------------------------------------------- command line

def _run_cli(*files):
    args = build_parser().parse_args(["verify", *map(str, files)])
    return verify_main(args)


def test_cli_exit_codes(tmp_path, capsys):
    good = tmp_path / "good.json"
    save(reference.ring_all_reduce(4), good)
    bad = tmp_path / "bad.json"
    plan = reference.ring_all_reduce(4)
    del plan["ranks"][0]["workers"][0]["ops"][1]
    save(plan, bad)
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({"version": 7}))
    assert _run_cli(good) == 0
    assert "OK" in capsys.readouterr().out
    assert _run_cli(good, bad) == 1
    assert "issue(s)" in capsys.readouterr().out
    assert _run_cli(good, bad, invalid) == 2
    assert "unsupported plan version 7" in capsys.readouterr().err
    assert _run_cli(tmp_path / "missing.json") == 2


def test_cli_json_output(tmp_path, capsys):
    path = tmp_path / "p.json"
    save(reference.tree_broadcast(5, root=2), path)
    args = build_parser().parse_args(["verify", "--json", str(path)])
    assert verify_main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["issues"] == []


def test_forestcc_plan_entry_point(tmp_path, capsys):
    path = tmp_path / "p.json"
    save(reference.ring_sendrecv(4, in_place=True), path)
    assert plan_main(["verify", "-q", str(path)]) == 0
    assert capsys.readouterr().out == ""


def test_python_dash_m_entry_point(tmp_path):
    path = tmp_path / "p.json"
    save(reference.direct_all_to_all(3), path)
    # The installed package (plans load through its native module, _C), not the source tree:
    # a source checkout has no _C unless it is the editable install.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "forestcc.plan", "verify", str(path)],
                          capture_output=True, text=True,
                          env={**env, "XDG_CACHE_HOME": str(tmp_path)},
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout


# ----------------------------------------------------------------------------- bounded proofs

def test_verify_within_limits_or_too_large():
    plan = reference.ring_all_reduce(6, parts=2)
    unbounded = verify(plan)
    assert str(verify(plan, max_work=10**9, max_memory=1 << 30)) == str(unbounded)
    with pytest.raises(v.TooLarge, match="work units"):
        verify(plan, max_work=1000)
    with pytest.raises(v.TooLarge, match="bytes of memory"):
        verify(plan, max_memory=10_000)


def test_verifier_effort_is_counted_not_timed():
    plan = reference.direct_all_to_all(5)
    counts = []
    for _ in range(2):
        verifier = v._Verifier(plan, "p", max_work=10**12, max_memory=10**12)
        verifier.run()
        counts.append(verifier.work)
    assert counts[0] == counts[1] > 0
    with pytest.raises(v.TooLarge):  # the same count decides at the same point every time
        verify(plan, max_work=counts[0] - 1)
    verify(plan, max_work=counts[0])


def test_balance_issues_is_the_static_check():
    plan = reference.ring_all_reduce(3)
    assert v.balance_issues(plan) == []
    plan["ranks"][0]["workers"][0]["ops"].append({"op": "signal", "ch": 0})
    issues = v.balance_issues(plan)
    assert [i.kind for i in issues] == [v.UNBALANCED]
    assert "rank 0 channel 0 signals" in issues[0].message


# ----------------------------------------------------------------------------- plan files at load

def _racy(nranks=3):
    """Signals balance, but a put lands in the wrong output block: only the full proof sees it."""
    plan = reference.ring_all_gather(nranks)
    for entry in plan["ranks"]:
        for worker in entry["workers"]:
            for op in worker["ops"]:
                if op["op"] in (ops.PUT, ops.PUT_SIGNAL):
                    op["dst"] = [OUT, (op["dst"][1] + plan["chunks_per_block"])
                                 % plan["buffers"][OUT]]
                    return plan
    raise AssertionError("no put")


def _no_verifier(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("verified again")
    monkeypatch.setattr(v, "verify", refuse)


def test_plan_files_are_proven_once_per_content(tmp_path, monkeypatch):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    save(reference.ring_all_reduce(3), good)
    save(_racy(), bad)
    assert v.balance_issues(_racy()) == []  # only the proof finds what is wrong
    assert proof.load_proven(good)["nranks"] == 3
    assert proof.plan_status(good) == proof.PROVEN
    with pytest.raises(PlanError) as refused:
        proof.load_proven(bad)
    first = str(refused.value).splitlines()[0]
    assert first.startswith(f"{bad}: refused before running") and "plan verify" in first
    # on disk: the next process (here: a cleared memory) reads the outcome instead of proving
    records = sorted(p.name for p in proof.cache_dir().iterdir() if not p.name.startswith("."))
    assert len(records) == 2 and all(r.endswith("-" + proof.verifier_version()) for r in records)
    monkeypatch.setattr(proof, "_seen", {})
    _no_verifier(monkeypatch)
    proof.load_proven(good)
    with pytest.raises(PlanError) as again:
        proof.load_proven(bad)
    assert str(again.value) == str(refused.value)  # the same message on every rank and job


def test_a_recorded_proof_holds_for_its_content_and_verifier_version(tmp_path, monkeypatch):
    path = tmp_path / "bad.json"
    save(_racy(), path)
    proof.record_proof(path.read_bytes())  # what `plan verify` / `plan generate` record
    assert proof.load_proven(path)  # taken on the record's word
    monkeypatch.setattr(proof, "_seen", {})
    monkeypatch.setattr(proof, "_version", "another-verifier")
    with pytest.raises(PlanError, match="refused before running"):
        proof.load_proven(path)
    monkeypatch.setattr(proof, "_seen", {})
    monkeypatch.setattr(proof, "_version", None)
    path.write_text(path.read_text() + " ")  # other bytes, no record
    with pytest.raises(PlanError, match="refused before running"):
        proof.load_proven(path)


def test_plans_too_large_to_prove_run_only_with_a_recorded_proof(tmp_path, monkeypatch):
    # before, a plan too large to prove at load ran with the static checks alone, and "too large"
    # could be declared (chunks_per_block 2**20): a wrong put returned wrong data on every rank
    monkeypatch.setattr(proof, "MAX_WORK", 100)
    racy, unbalanced, good = tmp_path / "racy.json", tmp_path / "unbalanced.json", tmp_path / "good.json"
    save(_racy(), racy)
    plan = reference.ring_all_reduce(3)
    plan["ranks"][1]["workers"][0]["ops"].insert(0, {"op": "wait", "ch": 0})
    save(plan, unbalanced)
    save(reference.ring_all_gather(3), good)
    for path in (racy, good):  # balanced, too large: refused, saying how to prove it
        with pytest.raises(PlanError, match=re.escape(f"{path}: refused before running: too large to prove at "
                                                      f"load") + ".*" + re.escape(f"forestcc plan verify {path}")):
            proof.load_proven(path)
        assert proof.plan_status(path) == proof.STATIC_ONLY
    with pytest.raises(PlanError, match=r"unbalanced\.json: .*unbalanced_signals"):
        proof.load_proven(unbalanced)
    # a recorded proof (what `forestcc plan verify` writes) lets the good one run whatever its size
    proof.record_proof(good.read_bytes())
    assert proof.load_proven(good)["collective"] == "all_gather"
    # the record of "too large" holds for the limits it was found under only
    monkeypatch.setattr(proof, "MAX_WORK", 10**9)
    monkeypatch.setattr(proof, "_seen", {})
    with pytest.raises(PlanError, match="the plan does not pass forestcc's verifier"):
        proof.load_proven(racy)
    monkeypatch.setattr(proof, "MAX_MEMORY", 1000)
    monkeypatch.setattr(proof, "_seen", {})
    proof._record_path(hashlib.sha256(racy.read_bytes()).hexdigest()).unlink()
    with pytest.raises(PlanError, match="too large to prove at load"):
        proof.load_proven(racy)
    assert proof.plan_status(racy) == proof.STATIC_ONLY


def test_a_plan_dict_is_proven_like_a_file(monkeypatch):
    # before, algo={...} was validated only: a wrong dict returned wrong data on every rank
    monkeypatch.setattr(proof, "_seen", {})
    with pytest.raises(PlanError, match=r"<algo dict>: refused before running: the plan does not pass"):
        proof.proven_dict(_racy())
    good = reference.ring_all_gather(3)
    assert proof.proven_dict(good) == proof.proven_dict(json.loads(json.dumps(good)))
    with pytest.raises(PlanError, match="<algo dict>: "):
        proof.proven_dict({"collective": "all_gather"})  # the validator's refusal, as before
    monkeypatch.setattr(proof, "MAX_WORK", 100)
    monkeypatch.setattr(proof, "_seen", {})
    other = reference.ring_all_gather(5)
    with pytest.raises(PlanError, match=r"too large to prove at load.*record_proof"):
        proof.proven_dict(other)


def test_invalid_files_are_refused_before_any_proof(tmp_path, monkeypatch):
    _no_verifier(monkeypatch)
    path = tmp_path / "slices.json"
    plan = reference.ring_all_reduce(2)
    plan["pipeline"] = {"max_slices": 2**31 - 1, "min_slice_bytes": 0}
    path.write_text(json.dumps(plan))
    with pytest.raises(PlanError, match=re.escape(f"{path}: pipeline: 'max_slices' is 2147483647")):
        proof.load_proven(path)


def test_proofs_work_without_a_writable_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # cache_dir() cannot be made
    path = tmp_path / "bad.json"
    save(_racy(), path)
    with pytest.raises(PlanError, match="refused before running"):
        proof.load_proven(path)


def test_cli_verify_records_the_proof(tmp_path, monkeypatch, capsys):
    path = tmp_path / "p.json"
    save(reference.ring_all_reduce(4), path)
    assert plan_main(["verify", "-q", str(path)]) == 0
    _no_verifier(monkeypatch)
    proof.load_proven(path)
    assert proof.plan_status(path) == proof.PROVEN


def test_forest_generator_records_the_proof_of_what_it_writes(tmp_path, monkeypatch, capsys):
    path = tmp_path / "ag.json"
    assert plan_main(["generate", "forest", "--topology", "dgx-a100x1", "--collective",
                      "all_gather", "-o", str(path)]) == 0
    _no_verifier(monkeypatch)
    proof.load_proven(path)
    assert proof.plan_status(path) == proof.PROVEN


def _cpp_digest(root, sources, changed=None):
    """The digest CMakeLists.txt compiles into _C: SHA-256 of "<path> <SHA-256 of file>\\n"
    lines; `changed`: {path: replacement bytes}."""
    import hashlib
    lines = ""
    for source in sources:
        data = (changed or {}).get(source)
        if data is None:
            data = (root / source).read_bytes()
        lines += f"{source} {hashlib.sha256(data).hexdigest()}\n"
    return hashlib.sha256(lines.encode()).hexdigest()


def test_the_verifier_version_covers_its_cpp_sources(monkeypatch):
    """_C carries a digest of the C++ sources the verdict depends on (the build computes it from
    the files it names), and verifier_version changes with it."""
    from pathlib import Path

    from forestcc import _C
    root = Path(__file__).resolve().parents[1]
    sources = _C.plan.VERIFIER_CPP_SOURCES
    for needed in ("cpp/src/plan/validate.cpp", "cpp/src/plan/json.cpp",
                   "cpp/src/python/plan_dict.cpp", "cpp/src/python/verifier_clocks.cpp",
                   "cpp/src/python/verifier_coaccess.cpp", "cpp/src/python/verifier_memory.cpp",
                   "cpp/src/python/verifier_layout.hpp"):
        assert needed in sources
    if not all((root / s).is_file() for s in sources):
        pytest.skip("not a source checkout")
    # The build's digest is of these files as they are (a stale build fails here: rebuild).
    assert _C.plan.VERIFIER_CPP_DIGEST == _cpp_digest(root, sources)
    # Every native function the verifier's Python modules call is defined in a listed file: a
    # binding added in a file of its own that the list forgets fails here.
    import re
    here = Path(proof.__file__).parent
    called = {name for module in proof._VERIFIER_SOURCES
              for name in re.findall(r"_C\.plan\.(\w+)", (here / module).read_text())}
    assert {"ChunkMemory", "co_access", "load_text"} <= called
    bindings = sorted((root / "cpp/src/python").glob("*.cpp"))
    for name in called:
        defining = [str(f.relative_to(root)) for f in bindings if f'"{name}"' in f.read_text()]
        assert defining, f"_C.plan.{name} is bound nowhere in cpp/src/python"
        assert set(defining) <= set(sources), (name, defining)
    # A change to any one of them changes the digest, and with it the version.
    validator = (root / "cpp/src/plan/validate.cpp").read_bytes()
    edited = _cpp_digest(root, sources, {"cpp/src/plan/validate.cpp": validator + b"\n"})
    monkeypatch.setattr(proof, "_version", None)
    before = proof.verifier_version()
    monkeypatch.setattr(proof, "_version", None)
    monkeypatch.setattr(_C.plan, "VERIFIER_CPP_DIGEST", edited)
    assert proof.verifier_version() != before


def test_chunk_records_past_the_dense_index_report_the_same():
    # The verifier's chunk records (_C.plan.ChunkMemory) find a location through a dense index
    # up to 2**28 locations (ranks x chunks of a rank) and through a hash map beyond: a broken
    # ring whose declared scratch takes it past that reports what it reports below.
    from forestcc.plan import builtin
    plan = builtin.generate("ring", "all_reduce", 65)
    ops_of = plan["ranks"][3]["workers"][0]["ops"]
    del ops_of[next(i for i, op in enumerate(ops_of) if op["op"] == ops.WAIT and i > 2)]
    big = copy.deepcopy(plan)
    big["buffers"]["scratch"] = 4194304
    assert 65 * sum(big["buffers"].values()) > 2**28
    small, large = verify(plan), verify(big)
    assert not small.ok and small.kinds() & {v.RACE, v.UNINITIALIZED}
    assert [str(i) for i in large.issues] == [str(i) for i in small.issues]


def test_chunk_records_refuse_what_is_outside_the_plan():
    # _C.plan.ChunkMemory trusts a valid plan's refs; what no valid plan has is refused (never
    # read out of bounds), through the dense index and the hash map alike.
    from forestcc import _C
    for scratch in (1, 2**28):  # 2 ranks x (2 + 2 + scratch) chunks: dense, then the hash map
        memory = _C.plan.ChunkMemory([2, 2, scratch], 1, 0, 2, lambda values: values[0])
        with pytest.raises(ValueError, match="not \\[buffer, index\\]"):
            memory.location(0, ["input"])
        outside = memory.location(1, ["scratch", scratch])  # one past rank 1's memory
        with pytest.raises(IndexError, match="outside the plan's memory"):
            memory.init(outside, "x")
        with pytest.raises(ValueError, match="negative chunk count"):
            memory.move(0, 1, -1, {}, 0, 1, 0)
        assert len(memory) == 0  # nothing half made
        memory.init(memory.location(1, ["input", 0]), "x")
        with pytest.raises(ValueError, match="one finishing clock per rank"):
            memory.late([{}])
        assert memory.late([{}, {}]) == []
