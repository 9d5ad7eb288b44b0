"""Planted bugs for plan verifier tests: each check mutates a correct plan in place (a dropped
wait, a dropped signal, a wrong chunk index, an unsynchronized extra put) and asserts that
forestcc.plan.verify reports it. Shared by test_verifier.py (reference plans) and
test_generators.py (built-in plans); `data` is hypothesis' st.data()."""
from __future__ import annotations

from forestcc.plan import ops, verify
from forestcc.plan import verifier as v
from hypothesis import strategies as st

# Issues that mean "this plan computes something wrong", as opposed to bookkeeping.
SUBSTANTIVE = {v.RACE, v.DEADLOCK, v.WRONG_RESULT, v.EARLY, v.UNFINISHED, v.UNINITIALIZED,
               v.INPUT_WRITE, v.NOT_SYNCHRONIZED, v.OVERLAP}


def ops_positions(plan, names=None):
    """(rank, worker, step) of every op, or of the ops named in `names`."""
    return [(r, w, s) for r, entry in enumerate(plan["ranks"])
            for w, worker in enumerate(entry["workers"])
            for s, op in enumerate(worker["ops"]) if names is None or op["op"] in names]


def check_dropped_wait(plan, data) -> None:
    positions = ops_positions(plan, {ops.WAIT})
    if not positions:
        return
    r, w, s = data.draw(st.sampled_from(positions))
    del plan["ranks"][r]["workers"][w]["ops"][s]
    result = verify(plan)
    assert v.UNBALANCED in result.kinds()
    # and it is a real bug, not only unbalanced bookkeeping
    assert result.kinds() & SUBSTANTIVE, str(result)


def check_dropped_signal(plan, data) -> None:
    positions = ops_positions(plan, {ops.SIGNAL, ops.PUT_SIGNAL})
    if not positions:
        return
    r, w, s = data.draw(st.sampled_from(positions))
    op = plan["ranks"][r]["workers"][w]["ops"][s]
    if op["op"] == ops.PUT_SIGNAL:
        op["op"] = ops.PUT  # keep the data, lose the signal
    else:
        del plan["ranks"][r]["workers"][w]["ops"][s]
    result = verify(plan)
    assert v.DEADLOCK in result.kinds(), str(result)
    deadlocks = [i for i in result.issues if i.kind == v.DEADLOCK]
    assert all(i.rank is not None and i.worker is not None and i.step is not None
               for i in deadlocks)


def check_wrong_chunk_index(plan, data) -> None:
    candidates = []
    for r, w, s in ops_positions(plan):
        op = plan["ranks"][r]["workers"][w]["ops"][s]
        refs = [(f, None) for f in ops.REF_FIELDS if f in op]
        refs += [(ops.REF_LIST_FIELD, j) for j in range(len(op.get(ops.REF_LIST_FIELD, [])))]
        for field, j in refs:
            buffer, _index = op[field] if j is None else op[field][j]
            if op["op"] == ops.REDUCE_PUT and field == "dst" and buffer == ops.SCRATCH:
                # a staging place only this op reads (it puts from it): moved to another free
                # scratch chunk, the plan stays correct (hypothesis found such a case)
                continue
            if plan["buffers"][buffer] - op.get("n", 1) >= 1:  # has another valid index
                candidates.append((r, w, s, field, j))
    if not candidates:
        return
    r, w, s, field, j = data.draw(st.sampled_from(candidates))
    op = plan["ranks"][r]["workers"][w]["ops"][s]
    ref = op[field] if j is None else op[field][j]
    last = plan["buffers"][ref[0]] - op.get("n", 1)
    k = plan["chunks_per_block"]
    old = ref[1]
    ref[1] = data.draw(st.integers(0, last).filter(lambda i: i != old))
    result = verify(plan)
    assert not result.ok
    if ref[1] % k != old % k:
        # a chunk of another part: refused statically (lengths differ for uneven counts)
        assert result.kinds() == {v.INVALID} and "different parts" in str(result), str(result)
    else:
        assert result.kinds() & SUBSTANTIVE, str(result)


def check_added_conflicting_put(plan, data) -> None:
    """Repeat an existing put from a new, unsynchronized worker over a new channel pair."""
    positions = ops_positions(plan, {ops.PUT, ops.PUT_SIGNAL})
    if not positions:
        return
    r, w, s = data.draw(st.sampled_from(positions))
    op = plan["ranks"][r]["workers"][w]["ops"][s]
    peer = plan["ranks"][r]["channels"][op["ch"]]["peer"]
    new_channels = []
    for rank, other in ((r, peer), (peer, r)):  # appended last on both sides: they pair up
        channels = plan["ranks"][rank]["channels"]
        channels.append({"id": len(channels), "peer": other, "transport": "auto"})
        new_channels.append(len(channels) - 1)
    workers = plan["ranks"][r]["workers"]
    workers.append({"id": len(workers), "ops": [
        {"op": ops.PUT, "ch": new_channels[0], "src": op["src"], "dst": op["dst"],
         "n": op.get("n", 1)}]})
    result = verify(plan)
    assert v.RACE in result.kinds(), str(result)
    # (eager plans may write a peer's scratch bank before it entered: no entry rule there)
    if plan.get("scratch_banks", 1) == 1 or op["dst"][0] != ops.SCRATCH:
        assert v.EARLY in result.kinds()
    # the race names the added put, as the access reported or as the one it conflicts with
    added = f"rank {r}, worker {len(workers) - 1}, step 0 (put)"
    assert any(i.kind == v.RACE and added in i.message for i in result.issues)
