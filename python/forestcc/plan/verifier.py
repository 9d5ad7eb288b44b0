"""The plan verifier: symbolic execution with happens-before tracking.

Every rank's input chunk i starts as the symbol (rank, i); copies move contents, reductions
combine them (see semantics.py). A scheduler runs any worker that can make progress until all
are done; workers left waiting are a deadlock, and since waits are the only blocking ops and
signals only ever add up, one schedule finds every deadlock.

Happens-before uses vector clocks with one component per worker and one per channel "lane".
Local ops (copy, reduce) are events of their worker, and so is get_reduce, whose worker reads
the peer's memory itself while it reduces. Channel ops (put, get, the put of
reduce_put, signal) are events of the channel's lane: they are issued in worker program order
but carried out asynchronously, in order within the channel, as a TCP proxy does. Hence:

- a signal orders before it the worker's earlier local ops and earlier ops on *that* channel
  (and on channels the worker flushed), not puts on other channels;
- a wait joins the matched signal's clock into the worker (the k-th wait takes the k-th signal);
- flush joins the lane into its worker: after it the worker may reuse a put's source or read a
  get's destination; the end of a worker flushes all its channels (the executor must too).

Each memory location (rank, buffer, chunk) remembers its last write and the reads since. A
write not ordered after both, or a read not ordered after the write, is a race. A remote write
or read of a rank's memory that is not ordered before that rank finishes is "unfinished": the
user could reuse the buffer while it is still in flight. Symmetrically, a remote access to a
rank's memory must come after some event of that rank ("before_peer_entered"): until the
rank calls the collective its user may still be filling the input or reading the last output,
and its scratch may still serve the previous call. If the plan has no race, every
schedule gives the same contents, so checking the one executed schedule is enough.

Eager plans (scratch_banks 2) may write a peer's scratch before it entered: the scratch bank
they use was last used two eager calls ago. That is safe when no rank can get two eager calls
ahead of another, i.e. when every rank, before it finishes, has seen an event of every other
rank in this call (the barrier condition, "not_synchronized" when it fails). Reads of a bank
before this call wrote it are still "uninitialized_read": stale data of an older call.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from . import format as plan_format
from . import geometry, ops, semantics

# Issue kinds.
INVALID = "invalid"                # structural error (format validation)
DEADLOCK = "deadlock"              # a wait that can never be satisfied
UNBALANCED = "unbalanced_signals"  # signals != waits on a channel pair: breaks the next slice
RACE = "race"                      # conflicting accesses not ordered by happens-before
UNFINISHED = "unfinished"          # remote access to a rank's memory not done when it returns
EARLY = "before_peer_entered"      # remote access to a rank's memory before it joined the call
INPUT_WRITE = "input_write"        # the user's input must stay intact
UNINITIALIZED = "uninitialized_read"
OVERLAP = "overlap"                # copy/reduce with partially overlapping source and destination
WRONG_RESULT = "wrong_result"
NOT_SYNCHRONIZED = "not_synchronized"  # barrier: a rank can finish before another started

ISSUE_KINDS = (INVALID, DEADLOCK, UNBALANCED, RACE, UNFINISHED, EARLY, INPUT_WRITE,
               UNINITIALIZED, OVERLAP, WRONG_RESULT, NOT_SYNCHRONIZED)


@dataclass(frozen=True)
class Issue:
    """One problem, located at a rank/worker/step where that makes sense (else None)."""
    kind: str
    rank: int | None
    worker: int | None
    step: int | None
    message: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.message}"


@dataclass
class VerifyResult:
    """Outcome of verify(): ok when there are no issues."""
    name: str
    issues: list[Issue] = field(default_factory=list)
    ops_executed: int = 0

    @property
    def ok(self) -> bool:
        """True when the plan has no issue at all."""
        return not self.issues

    def kinds(self) -> set:
        """The set of issue kinds found."""
        return {issue.kind for issue in self.issues}

    def __str__(self) -> str:
        if self.ok:
            return f"{self.name}: OK ({self.ops_executed} ops executed, no issues)"
        lines = [f"{self.name}: {len(self.issues)} issue(s)"]
        shown: dict = {}
        for issue in self.issues:
            shown[issue.kind] = shown.get(issue.kind, 0) + 1
            if shown[issue.kind] <= 20:
                lines.append(f"  {issue}")
        for kind, count in shown.items():
            if count > 20:
                lines.append(f"  ... and {count - 20} more {kind} issue(s)")
        return "\n".join(lines)


def _where(rank, worker, step, name) -> str:
    return f"rank {rank}, worker {worker}, step {step} ({name})"


class _Location:
    """Content and access history of one chunk of one rank's memory."""
    __slots__ = ("reads", "value", "write_comp", "write_info", "write_stamp")

    def __init__(self, value):
        self.value = value
        self.write_comp = -1  # -1: the initial content, ordered before everything
        self.write_stamp = 0
        self.write_info = None
        self.reads: dict = {}  # component -> (stamp, info) of the latest read by it


class _Verifier:
    def __init__(self, plan: dict, name: str):
        self.plan = plan
        self.name = name
        self.issues: list[Issue] = []
        self.nranks = n = plan["nranks"]
        self.collective = plan["collective"]
        self.k = plan["chunks_per_block"]
        self.alias = [geometry.alias_function(self.collective, plan["in_place"], r, self.k)
                      for r in range(n)]
        ranks = plan["ranks"]
        # Vector clock components: one per worker, one per channel lane.
        self.worker_comp, self.lane_comp, self.rank_comps = [], [], []
        comps = 0
        for entry in ranks:
            first = comps
            self.worker_comp.append(list(range(comps, comps + len(entry["workers"]))))
            comps += len(entry["workers"])
            self.lane_comp.append(list(range(comps, comps + len(entry["channels"]))))
            comps += len(entry["channels"])
            self.rank_comps.append((first, comps))
        self.ncomps = comps
        self.peer = [[c["peer"] for c in entry["channels"]] for entry in ranks]
        self.partner = self._pair_channels()
        self.signals = {}  # (rank, ch) -> list of clocks of the signals sent on it
        self.waits_done = {}  # (rank, ch) -> waits completed
        self.lanes = {}  # (rank, ch) -> lane clock
        self.memory = {}  # (rank, buffer, index) -> _Location
        self.races = {}  # (kind, info, info) -> [location key, ...]: one issue per op pair
        self.lanes_after_peer_entered = set()  # (rank, ch) whose lane has seen a peer event
        self.banked = plan.get("scratch_banks", 1) == 2  # eager: peers' scratch needs no entry
        for r in range(n):
            for i in range(plan["buffers"][ops.INPUT]):
                key = (r,) + self.alias[r](ops.INPUT, i)
                self.memory[key] = _Location(semantics.input_symbol(r, i))
        out_chunks = plan["buffers"][ops.OUTPUT]
        # Physical input chunks the output aliases (in-place reduce_scatter/scatter): writable.
        self.writable_input = [
            {idx for buf, idx in (self.alias[r](ops.OUTPUT, i) for i in range(out_chunks))
             if buf == ops.INPUT} for r in range(n)]

    def _pair_channels(self) -> dict:
        """(rank, ch) -> (peer, ch on peer): the i-th channel r->p pairs with the i-th p->r;
        loopback channels pair up in id order (0 with 1, 2 with 3, ...)."""
        by_pair: dict = {}
        for r, peers in enumerate(self.peer):
            for c, p in enumerate(peers):
                by_pair.setdefault((r, p), []).append(c)
        partner = {}
        for (r, p), chans in by_pair.items():
            if r == p:
                for a, b in zip(chans[0::2], chans[1::2]):
                    partner[(r, a)], partner[(r, b)] = (r, b), (r, a)
            else:
                for a, b in zip(chans, by_pair[(p, r)]):
                    partner[(r, a)] = (p, b)
        return partner

    # -- memory accesses ------------------------------------------------------------------

    def _race(self, kind: str, info, other, key) -> None:
        self.races.setdefault((kind, info, other), []).append(key)

    def _read(self, key, clock, comp, stamp, info):
        loc = self.memory.get(key)
        if loc is None:  # recorded all the same, so a later unordered write is a race too
            loc = self.memory[key] = _Location(None)
        if loc.write_comp < 0 and loc.value is None:
            self._race(UNINITIALIZED, info, None, key)
        elif loc.write_comp >= 0 and clock[loc.write_comp] < loc.write_stamp:
            self._race(RACE, info, loc.write_info, key)
        previous = loc.reads.get(comp)
        if previous is None or previous[0] < stamp:
            loc.reads[comp] = (stamp, info)
        return loc.value

    def _write(self, key, value, clock, comp, stamp, info) -> None:
        loc = self.memory.get(key)
        if loc is None:
            loc = self.memory[key] = _Location(None)
        else:
            if loc.write_comp >= 0 and clock[loc.write_comp] < loc.write_stamp:
                self._race(RACE, info, loc.write_info, key)
            for read_comp, (read_stamp, read_info) in loc.reads.items():
                if clock[read_comp] < read_stamp:
                    self._race(RACE, info, read_info, key)
        rank, buffer, index = key
        if buffer == ops.INPUT and index not in self.writable_input[rank]:
            self._race(INPUT_WRITE, info, None, key)
        loc.value, loc.write_comp, loc.write_stamp, loc.write_info = value, comp, stamp, info
        loc.reads = {}

    def _needs_entry(self, remote_ref) -> bool:
        """Whether accessing a peer's ``remote_ref`` must wait until that peer entered: always,
        except a peer's scratch in an eager plan (its banks; see the module docstring)."""
        return not (self.banked and remote_ref[0] == ops.SCRATCH)

    def _keys(self, rank: int, ref, count: int) -> list:
        buffer, index = ref
        alias = self.alias[rank]
        return [(rank,) + alias(buffer, i) for i in range(index, index + count)]

    def _move(self, src_keys, dst_keys, clock, comp, stamp, info) -> None:
        values = [self._read(key, clock, comp, stamp, info) for key in src_keys]
        for key, value in zip(dst_keys, values):
            self._write(key, value, clock, comp, stamp, info)

    def _reduce(self, rank, op, clock, comp, stamp, info, remote=None) -> None:
        """dst = combine(srcs); ``remote`` (get_reduce) adds the peer's chunks as the last
        source, read by this worker itself."""
        count = ops.op_count(op)
        dst = self._keys(rank, op["dst"], count)
        srcs = [self._keys(rank, ref, count) for ref in op["srcs"]]
        if remote is not None:
            srcs.append(remote)
        for src in srcs:
            self._check_overlap(src, dst, info, allow_identical=True)
        for j in range(count):
            values = [self._read(src[j], clock, comp, stamp, info) for src in srcs]
            value = None if any(v is None for v in values) else semantics.combine(values)
            self._write(dst[j], value, clock, comp, stamp, info)

    def _check_overlap(self, src_keys, dst_keys, info, allow_identical: bool) -> None:
        if src_keys == dst_keys and allow_identical:
            return
        if set(src_keys) & set(dst_keys):
            rank, worker, step, _name = info
            self.issues.append(Issue(OVERLAP, rank, worker, step,
                                     f"{_where(*info)}: source and destination overlap "
                                     f"without being the same chunks"))

    # -- execution ------------------------------------------------------------------------

    def _lane_event(self, rank: int, ch: int, worker_clock):
        """A channel op issued now: its lane catches up with the worker, then ticks."""
        lane = self.lanes.get((rank, ch))
        if lane is None:
            lane = self.lanes[(rank, ch)] = worker_clock.copy()
        else:
            np.maximum(lane, worker_clock, out=lane)
        comp = self.lane_comp[rank][ch]
        lane[comp] += 1
        return lane, comp, int(lane[comp])

    def _signal(self, rank: int, ch: int, clock) -> None:
        lane, _, _ = self._lane_event(rank, ch, clock)
        self.signals.setdefault((rank, ch), []).append(lane.copy())

    def _put(self, rank, op, ch, src_field, dst_field, clock, info) -> None:
        count = ops.op_count(op)
        lane, comp, stamp = self._lane_event(rank, ch, clock)
        peer = self.peer[rank][ch]
        remote_ref = op[src_field] if op["op"] == ops.GET else op[dst_field]
        if (peer != rank and self._needs_entry(remote_ref)
                and (rank, ch) not in self.lanes_after_peer_entered):
            first, end = self.rank_comps[peer]
            if lane[first:end].any():
                self.lanes_after_peer_entered.add((rank, ch))
            else:
                self._race(EARLY, info, None, self._keys(peer, remote_ref, count)[0])
        src_rank, dst_rank = (peer, rank) if op["op"] == ops.GET else (rank, peer)
        self._move(self._keys(src_rank, op[src_field], count),
                   self._keys(dst_rank, op[dst_field], count), lane, comp, stamp, info)

    def _step(self, rank: int, worker: int, step: int, op: dict, clock) -> bool:
        """Runs one op; False when it is a wait that cannot complete yet."""
        name = op["op"]
        info = (rank, worker, step, name)
        wcomp = self.worker_comp[rank][worker]
        ch = op.get("ch")
        if name == ops.WAIT:
            partner = self.partner[(rank, ch)]
            done = self.waits_done.get((rank, ch), 0)
            sent = self.signals.get(partner, ())
            if len(sent) <= done:
                return False
            np.maximum(clock, sent[done], out=clock)
            self.waits_done[(rank, ch)] = done + 1
            clock[wcomp] += 1
        elif name == ops.SIGNAL:
            self._signal(rank, ch, clock)
        elif name == ops.FLUSH:
            lane = self.lanes.get((rank, ch))
            if lane is not None:
                np.maximum(clock, lane, out=clock)
            clock[wcomp] += 1
        elif name in (ops.PUT, ops.PUT_SIGNAL, ops.GET):
            self._put(rank, op, ch, "src", "dst", clock, info)
            if name == ops.PUT_SIGNAL:
                self._signal(rank, ch, clock)
        elif name == ops.COPY:
            clock[wcomp] += 1
            count = ops.op_count(op)
            src, dst = self._keys(rank, op["src"], count), self._keys(rank, op["dst"], count)
            self._check_overlap(src, dst, info, allow_identical=True)
            self._move(src, dst, clock, wcomp, int(clock[wcomp]), info)
        elif name == ops.GET_REDUCE:
            # The worker reads the peer's memory itself, synchronously: a worker event (no
            # lane, no flush), which must come after the peer entered.
            clock[wcomp] += 1
            peer = self.peer[rank][ch]
            remote = self._keys(peer, op["src"], ops.op_count(op))
            first, end = self.rank_comps[peer]
            if peer != rank and self._needs_entry(op["src"]) and not clock[first:end].any():
                self._race(EARLY, info, None, remote[0])
            self._reduce(rank, op, clock, wcomp, int(clock[wcomp]), info, remote)
        elif name in (ops.REDUCE_OP, ops.REDUCE_PUT):
            clock[wcomp] += 1
            self._reduce(rank, op, clock, wcomp, int(clock[wcomp]), info)
            if name == ops.REDUCE_PUT:
                self._put(rank, op, ch, "dst", "remote", clock, info)
        else:  # validation rejects unknown ops; this guards against ops.py growing alone
            raise AssertionError(f"verifier has no rule for op {name!r}")
        return True

    def run(self) -> VerifyResult:
        ranks = self.plan["ranks"]
        workers = [(r, w) for r in range(self.nranks) for w in range(len(ranks[r]["workers"]))]
        clocks = {rw: np.zeros(self.ncomps, dtype=np.int64) for rw in workers}
        pc = dict.fromkeys(workers, 0)
        owner = {}  # (rank, ch) -> worker using it, to wake waiters
        for r, w in workers:
            for op in ranks[r]["workers"][w]["ops"]:
                if "ch" in op:
                    owner[(r, op["ch"])] = w
        blocked_on = {}  # (rank, ch) whose partner signal is awaited -> (rank, worker)
        runnable = deque(workers)
        executed = 0
        while runnable:
            r, w = runnable.popleft()
            op_list = ranks[r]["workers"][w]["ops"]
            clock = clocks[(r, w)]
            while pc[(r, w)] < len(op_list):
                step = pc[(r, w)]
                op = op_list[step]
                if not self._step(r, w, step, op, clock):
                    blocked_on[self.partner[(r, op["ch"])]] = (r, w)
                    break
                pc[(r, w)] = step + 1
                executed += 1
                if op["op"] in (ops.SIGNAL, ops.PUT_SIGNAL):
                    waiter = blocked_on.pop((r, op["ch"]), None)
                    if waiter is not None:
                        runnable.append(waiter)
        stuck = [rw for rw in workers if pc[rw] < len(ranks[rw[0]]["workers"][rw[1]]["ops"])]
        self._check_balance(ranks)
        if stuck:
            self._report_deadlock(stuck, pc, owner, ranks)
        # The end of a worker flushes its channels; a rank is done when all its workers are.
        finished = [np.zeros(self.ncomps, dtype=np.int64) for _ in range(self.nranks)]
        for (r, w), clock in clocks.items():
            for ch, user in owner.items():
                if ch[0] == r and user == w and ch in self.lanes:
                    np.maximum(clock, self.lanes[ch], out=clock)
            np.maximum(finished[r], clock, out=finished[r])
        self._report_races()
        if not stuck:
            self._check_unfinished(finished)
            self._check_outputs()
            if self.collective == ops.BARRIER or self.banked:
                self._check_barrier(finished)
        return VerifyResult(self.name, self.issues, executed)

    # -- reports --------------------------------------------------------------------------

    def _check_balance(self, ranks) -> None:
        sent, waited = {}, {}
        for r, entry in enumerate(ranks):
            for worker in entry["workers"]:
                for op in worker["ops"]:
                    if op["op"] in (ops.SIGNAL, ops.PUT_SIGNAL):
                        sent[(r, op["ch"])] = sent.get((r, op["ch"]), 0) + 1
                    elif op["op"] == ops.WAIT:
                        key = self.partner[(r, op["ch"])]
                        waited[key] = waited.get(key, 0) + 1
        for key in sorted(set(sent) | set(waited)):
            if sent.get(key, 0) != waited.get(key, 0):
                (r, c), (p, pc) = key, self.partner[key]
                self.issues.append(Issue(
                    UNBALANCED, r, None, None,
                    f"rank {r} channel {c} signals {sent.get(key, 0)} time(s) but its partner, "
                    f"rank {p} channel {pc}, waits {waited.get(key, 0)} time(s); semaphores count "
                    f"on across slices, so the next slice would be mismatched"))

    def _report_deadlock(self, stuck, pc, owner, ranks) -> None:
        for r, w in stuck:
            step = pc[(r, w)]
            ch = ranks[r]["workers"][w]["ops"][step]["ch"]
            p, pch = self.partner[(r, ch)]
            needed = self.waits_done.get((r, ch), 0) + 1
            sent = len(self.signals.get((p, pch), ()))
            other = owner.get((p, pch))
            if other is None:
                state = f"no worker of rank {p} uses channel {pch}"
            elif (p, other) in pc and pc[(p, other)] < len(ranks[p]["workers"][other]["ops"]):
                state = f"rank {p} worker {other} is itself stuck at step {pc[(p, other)]}"
            else:
                state = f"rank {p} worker {other} finished without sending it"
            self.issues.append(Issue(
                DEADLOCK, r, w, step,
                f"{_where(r, w, step, 'wait')}: waits on channel {ch} (peer rank {p}) for signal "
                f"#{needed} from rank {p} channel {pch}, which sent {sent}; {state}"))

    def _report_races(self) -> None:
        for (kind, info, other), keys in self.races.items():
            rank, worker, step, _ = info
            what = _describe_keys(keys)
            if kind == EARLY:
                message = (f"{_where(*info)}: accesses {what} before rank {keys[0][0]} is known "
                           f"to have entered the collective (it must signal first and this "
                           f"worker wait for it)")
            elif kind == UNINITIALIZED:
                message = f"{_where(*info)}: reads {what}, which nothing wrote before"
            elif kind == INPUT_WRITE:
                message = (f"{_where(*info)}: writes {what}, the user's input, which must stay "
                           f"intact")
            else:
                message = (f"{_where(*info)}: accesses {what} concurrently with "
                           f"{_where(*other)}: no signal/wait orders them")
            self.issues.append(Issue(kind, rank, worker, step, message))
        self.races.clear()

    def _check_unfinished(self, finished) -> None:
        late: dict = {}
        for key, loc in self.memory.items():
            done = finished[key[0]]
            if loc.write_comp >= 0 and done[loc.write_comp] < loc.write_stamp:
                late.setdefault(loc.write_info, []).append(key)
            for comp, (stamp, info) in loc.reads.items():
                if done[comp] < stamp:
                    late.setdefault(info, []).append(key)
        for info, keys in late.items():
            self.issues.append(Issue(
                UNFINISHED, info[0], info[1], info[2],
                f"{_where(*info)}: its access to {_describe_keys(keys)} may still be in flight "
                f"when rank {keys[0][0]} returns (no signal/wait orders it before that rank's "
                f"end)"))

    def _check_outputs(self) -> None:
        for r in range(self.nranks):
            expected = semantics.expected_outputs(self.collective, self.nranks, self.k, r,
                                                  self.plan.get("root"))
            for i, want in enumerate(expected):
                if want is None:
                    continue
                loc = self.memory.get((r,) + self.alias[r](ops.OUTPUT, i))
                got = loc.value if loc is not None else None
                if got != want:
                    self.issues.append(Issue(
                        WRONG_RESULT, r, None, None,
                        f"rank {r} output chunk {i}: expected {semantics.describe(want)}, "
                        f"got {semantics.describe(got)}"))

    def _check_barrier(self, finished) -> None:
        for r in range(self.nranks):
            for q in range(self.nranks):
                first, end = self.rank_comps[q]
                if q != r and not finished[r][first:end].any():
                    what = ("an eager call (scratch_banks 2), and the next one could overwrite "
                            f"a scratch bank rank {q} still reads" if self.banked else "the barrier")
                    self.issues.append(Issue(
                        NOT_SYNCHRONIZED, r, None, None,
                        f"rank {r} can finish {what} before rank {q} has started it"))


def _describe_keys(keys) -> str:
    """'rank 1 output chunks 0..3' style summary of (rank, buffer, index) keys."""
    keys = sorted(set(keys))
    rank, buffer, first = keys[0]
    same = [i for r, b, i in keys if (r, b) == (rank, buffer)]
    span = f"chunk {first}" if len(same) == 1 else f"chunks {same[0]}..{same[-1]}"
    extra = f" (and {len(keys) - len(same)} more locations)" if len(keys) > len(same) else ""
    return f"rank {rank} {buffer} {span}{extra}"


def verify(plan: dict, name: str | None = None) -> VerifyResult:
    """Checks a plan: structure, deadlock freedom, races, in-flight accesses, input left intact,
    uninitialized reads and, finally, the output against the collective's definition."""
    label = name or (plan.get("name") if isinstance(plan, dict) else None) or "<plan>"
    errors = plan_format.validation_errors(plan, label)
    if errors:
        return VerifyResult(label, [Issue(INVALID, None, None, None, e) for e in errors])
    return _Verifier(plan, label).run()
