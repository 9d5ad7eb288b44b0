"""Planted bugs for plan verifier tests: each check mutates a correct plan in place (a dropped
wait, a dropped signal, a wrong chunk index, an unsynchronized extra put) and asserts that
forestcc.plan.verify reports it. Shared by test_verifier.py (reference plans) and
test_generators.py (built-in plans); `data` is hypothesis' st.data(). Below them, `mutate`:
the seeded random mutator of test_plan_fuzz.py."""
from __future__ import annotations

import copy

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
    # Scratch chunks that hold the same block (the plan's scratch_blocks: a rank standing in for
    # several local indices keeps a copy) are the same data: no wrong index (hypothesis found
    # 2dh all_to_all in place on [1, 0, 1, 2, 2], rank 0's scratch 0 and 4).
    held = plan["ranks"][r].get("scratch_blocks") if ref[0] == ops.SCRATCH else None

    n = op.get("n", 1)

    def same_data(i: int) -> bool:
        return held is not None and max(i, old) + n <= len(held) and held[i:i + n] == held[old:old + n]

    if all(i == old or same_data(i) for i in range(last + 1)):
        return
    ref[1] = data.draw(st.integers(0, last).filter(lambda i: i != old and not same_data(i)))
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


# ----------------------------------------------------------------------------- random mutants
# A seeded fuzzer of plan files (test_plan_fuzz.py): small edits of a valid plan, of the kinds a
# hand edit or a generator bug makes. Most mutants break the plan; some leave it correct. Every
# mutant must be refused before it runs or compute exactly the right data.

def _refs(op):
    """(field, position in srcs or None) of every chunk ref of an op."""
    out = [(f, None) for f in ops.REF_FIELDS if f in op]
    return out + [(ops.REF_LIST_FIELD, j) for j in range(len(op.get(ops.REF_LIST_FIELD, [])))]


def _pick_op(plan, rng, names=None):
    positions = ops_positions(plan, names)
    if not positions:
        return None
    r, w, s = rng.choice(positions)
    return r, w, s, plan["ranks"][r]["workers"][w]["ops"]


def _random_channel(plan, rng, r):
    channels = plan["ranks"][r]["channels"]
    return rng.randrange(len(channels)) if channels else None


def _extra_sync(plan, rng, name):
    r = rng.randrange(plan["nranks"])
    ch = _random_channel(plan, rng, r)
    workers = plan["ranks"][r]["workers"]
    if ch is None or not workers:
        return None
    # the channel's own worker when it has one (a channel belongs to one worker)
    users = [w for w, worker in enumerate(workers) if any(op.get("ch") == ch for op in worker["ops"])]
    w = users[0] if users else rng.randrange(len(workers))
    op_list = workers[w]["ops"]
    op_list.insert(rng.randint(0, len(op_list)), {"op": name, "ch": ch})
    return f"extra {name} rank {r} worker {w} ch {ch}"


def _drop(plan, rng):
    picked = _pick_op(plan, rng)
    if picked is None:
        return None
    r, w, s, op_list = picked
    return f"drop rank {r} worker {w} step {s} ({op_list.pop(s)['op']})"


def _duplicate(plan, rng):
    picked = _pick_op(plan, rng)
    if picked is None:
        return None
    r, w, s, op_list = picked
    op_list.insert(s, copy.deepcopy(op_list[s]))
    return f"duplicate rank {r} worker {w} step {s} ({op_list[s]['op']})"


def _move(plan, rng):
    picked = _pick_op(plan, rng)
    if picked is None:
        return None
    r, w, s, op_list = picked
    op = op_list.pop(s)
    to = rng.randint(0, len(op_list))
    op_list.insert(to, op)
    return f"move rank {r} worker {w} step {s} ({op['op']}) to {to}"


def _pick_ref(plan, rng):
    """A random chunk reference of a random data op: (rank, worker, step, op, field, ref), or None."""
    picked = _pick_op(plan, rng, {o for o in ops.OPS if o not in (ops.SIGNAL, ops.WAIT, ops.FLUSH)})
    if picked is None:
        return None
    r, w, s, op_list = picked
    op = op_list[s]
    field, j = rng.choice(_refs(op))
    return r, w, s, op, field, op[field] if j is None else op[field][j]


def _chunk_index(plan, rng):
    picked = _pick_ref(plan, rng)
    if picked is None:
        return None
    r, w, s, op, field, ref = picked
    k = plan["chunks_per_block"]
    size = plan["buffers"][ref[0]] - op.get("n", 1)
    same_part = [i for i in range(ref[1] % k, size + 1, k) if i != ref[1]]
    if not same_part:
        return None
    ref[1] = rng.choice(same_part)
    return f"chunk index rank {r} worker {w} step {s} {field} -> {ref[1]}"


def _buffer(plan, rng):
    picked = _pick_ref(plan, rng)
    if picked is None:
        return None
    r, w, s, op, field, ref = picked
    others = [b for b in ops.BUFFERS
              if b != ref[0] and plan["buffers"][b] >= ref[1] + op.get("n", 1)]
    if not others:
        return None
    ref[0] = rng.choice(others)
    return f"buffer rank {r} worker {w} step {s} {field} -> {ref[0]}"


def _channel(plan, rng):
    picked = _pick_op(plan, rng, {o for o in ops.OPS if "ch" in ops.OP_FIELDS[o]})
    if picked is None:
        return None
    r, w, s, op_list = picked
    channels = len(plan["ranks"][r]["channels"])
    if channels < 2:
        return None
    op = op_list[s]
    op["ch"] = rng.choice([c for c in range(channels) if c != op["ch"]])
    return f"channel rank {r} worker {w} step {s} ({op['op']}) -> {op['ch']}"


def _kind(plan, rng):
    swaps = {ops.PUT: ops.PUT_SIGNAL, ops.PUT_SIGNAL: ops.PUT, ops.SIGNAL: ops.WAIT,
             ops.WAIT: ops.SIGNAL}
    picked = _pick_op(plan, rng, set(swaps))
    if picked is None:
        return None
    r, w, s, op_list = picked
    op = op_list[s]
    op["op"] = swaps[op["op"]]
    return f"kind rank {r} worker {w} step {s} -> {op['op']}"


def _count(plan, rng):
    picked = _pick_op(plan, rng, {o for o in ops.OPS if "n" in ops.OP_FIELDS[o]})
    if picked is None:
        return None
    r, w, s, op_list = picked
    op = op_list[s]
    n = op.get("n", 1) + rng.choice([-1, 1])
    if n < 1:
        return None
    op["n"] = n
    return f"n rank {r} worker {w} step {s} -> {n}"


def _slices(plan, rng):
    plan["pipeline"] = {"max_slices": rng.randint(1, 5), "min_slice_bytes": 0}
    return f"pipeline {plan['pipeline']}"


MUTATIONS = (lambda p, rng: _extra_sync(p, rng, ops.SIGNAL),
             lambda p, rng: _extra_sync(p, rng, ops.WAIT),
             _drop, _duplicate, _move, _chunk_index, _buffer, _channel, _kind, _count, _slices)


def mutate(plan, rng):
    """A copy of the plan with one or two random edits and a description, or (None, None) when
    the drawn edit does not apply to this plan. rng: random.Random (seeded by the caller)."""
    mutant = copy.deepcopy(plan)
    done = []
    for _ in range(1 if rng.random() < 0.8 else 2):
        what = rng.choice(MUTATIONS)(mutant, rng)
        if what is None:
            return None, None
        done.append(what)
    return mutant, "; ".join(done)
