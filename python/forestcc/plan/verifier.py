"""The plan verifier: symbolic execution with happens-before tracking.

Every rank's input chunk i starts as the symbol (rank, i); copies move contents, reductions
combine them (see semantics.py). A scheduler runs any worker that can make progress until all
are done; workers left waiting are a deadlock, and since waits are the only blocking ops and
signals only ever add up, one schedule finds every deadlock.

Happens-before uses vector clocks with one component per worker and one per channel "lane"
(clocks.py: sparse, and by default a rank's clocks keep only the components that access
memory its own components access).
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

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field

from forestcc import _C

from . import format as plan_format
from . import geometry, ops, semantics
from .bulk import paused_gc
from .clocks import Components

# Issue kinds.
INVALID = "invalid"                # structural error (format validation)
DEADLOCK = "deadlock"              # a wait that can never be satisfied
UNBALANCED = "unbalanced_signals"  # signals != waits on a channel pair: breaks the next slice
RACE = "race"                      # conflicting accesses not ordered by happens-before
UNFINISHED = "unfinished"          # remote access to a rank's memory not done when it returns
EARLY = "before_peer_entered"      # remote access to a rank's memory before it joined the call
INPUT_WRITE = "input_write"        # the user's input must stay intact
UNINITIALIZED = "uninitialized_read"
OVERLAP = "overlap"                # copy/reduce/loopback move with partly overlapping source and destination
WRONG_RESULT = "wrong_result"
NOT_SYNCHRONIZED = "not_synchronized"  # barrier: a rank can finish before another started

ISSUE_KINDS = (INVALID, DEADLOCK, UNBALANCED, RACE, UNFINISHED, EARLY, INPUT_WRITE,
               UNINITIALIZED, OVERLAP, WRONG_RESULT, NOT_SYNCHRONIZED)
# The kinds found by reading vector clocks: the ones projected clocks may over-report.
_CLOCK_KINDS = frozenset((RACE, UNFINISHED, EARLY, NOT_SYNCHRONIZED))


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


# Race kinds as the chunk records (_C.plan.ChunkMemory, cpp/src/python/verifier_memory.cpp)
# number them.
_RACE_KINDS = (RACE, UNINITIALIZED, INPUT_WRITE, EARLY)
_RACE_KIND = {kind: i for i, kind in enumerate(_RACE_KINDS)}


class TooLarge(Exception):
    """verify() with limits: proving this plan would take more work or memory than allowed.
    Raised before the limit is crossed by much, never after the verifier ran unbounded."""


# The verifier's effort, counted (never timed, so the outcome is the same on every machine and
# every rank). A work unit is a fraction of a microsecond of this pure-Python verifier's CPU time
# (0.2-0.5 us on the development machine); memory is the live vector clock entries and chunk
# records, in bytes. See _Verifier._charge.
_WORK_PER_OP = 16                # Python overhead of one op
_ENTRIES_PER_WORK = 2            # a wait's join or a signal's snapshot: per clock entry
_WORK_PER_CHUNK = 4              # one chunk read or written by an op
_SYMBOLS_PER_WORK = 16           # a reduction's content grows with the ranks it sums
_BYTES_PER_ENTRY = 100           # a sparse clock entry (dict slot, key and value)
# Clocks are projected (clocks.py) when a plan has more components than this: below, full
# clocks are small anyway, and a ring, whose orderings travel around all ranks, would otherwise
# be verified twice (projected, then re-checked).
_PROJECT_ABOVE_COMPONENTS = 8192
_ENTRIES_PER_LOGGED = 4          # a logged change (two list slots) costs half an entry
_BYTES_PER_LOCATION = 300        # a chunk's record: content, last write, readers


class _Verifier:
    def __init__(self, plan: dict, name: str, max_work: int | None = None,
                 max_memory: int | None = None, project: bool | None = None):
        self.plan = plan
        self.name = name
        self.max_work, self.max_memory = max_work, max_memory
        self.work = 0
        self.issues: list[Issue] = []
        self.nranks = n = plan["nranks"]
        self.collective = plan["collective"]
        self.k = plan["chunks_per_block"]
        ranks = plan["ranks"]
        reducing = self.collective in (ops.ALL_REDUCE, ops.REDUCE_SCATTER, ops.REDUCE)
        self.chunk_work = _WORK_PER_CHUNK + (n if reducing else 1) // _SYMBOLS_PER_WORK
        self.op_work = _WORK_PER_OP
        if max_work is not None:  # every op runs once at least: refuse at once, not midway
            total_ops = sum(len(w["ops"]) for entry in ranks for w in entry["workers"])
            if total_ops * self.op_work > max_work:
                raise TooLarge(f"proving it takes more than {max_work} work units "
                               f"({total_ops} ops)")
        # Vector clock components (clocks.py): one per worker, one per channel lane, one per
        # rank's entry; clocks are dicts, projected on what each rank's accesses are checked against.
        if project is None:  # projecting pays where full clocks would be wide
            width = sum(len(e["workers"]) + len(e["channels"]) for e in ranks) + n
            project = width > _PROJECT_ABOVE_COMPONENTS
        self.comps = Components(plan, project)
        self.worker_comp, self.lane_comp = self.comps.worker_comp, self.comps.lane_comp
        self.entered = self.comps.entered
        self.entries = 0  # clock entries alive (worker clocks and signal snapshots), for _charge
        # Incremental joins. Every change to a worker's clock is logged (worker component ->
        # [component, value, component, value, ...]), and a signal carries the sender's log
        # length: the sender's clock then is the log up to there. A worker that joined an
        # earlier signal of the same sender joins only the changes since; only the first signal
        # from a worker to another stands for the sender's whole clock (for a waiter that has
        # none yet), joined as the log up to there replays it (the same entries in the same
        # order as a copy of the clock, which it was before: thousands of entries, hundreds of
        # thousands of first signals at 1,024 ranks). So a wait costs what is new to it, and
        # signals cost no copies. The budget counts such a signal as the copy it was.
        self.logs: dict = {}
        # Pairs of components as one int (_pair), not a tuple: hundreds of thousands of them.
        self.joined: dict = {}  # (waiting worker component, sender's worker) -> log length
        self.copied: set = set()  # (sender's worker, waiting worker or None) given a copy already
        self.peer = [[c["peer"] for c in entry["channels"]] for entry in ranks]
        # Per-channel records are lists indexed by a channel's global number, the rank's first
        # channel number (channel_base[rank]) plus its id: about a million channels at 1,024
        # ranks, where dicts keyed by (rank, channel) tuples took hundreds of MB.
        self.channel_base, self.partner = _channel_numbers(plan)
        channels = len(self.partner)
        # Static, so found now (verify reports them after the run's issues).
        self.balance = balance_issues(self.plan, (self.channel_base, self.partner))
        # channel -> the signals sent on it, by number, as (size of the sender's clock when it is
        # the first signal of the pair, else None, lane component, stamp, sender's worker
        # component, sender's log length): the signal's
        # clock is the sender's then, with the lane component raised to the stamp. A signal is
        # dropped (None) once the matching wait took it. None: no signal sent yet.
        self.signals: list = [None] * channels
        self.waits_done = [0] * channels  # channel -> waits completed
        self.lane_events = [0] * channels  # channel -> events of its lane so far (its component)
        self.lanes_after_peer_entered = bytearray(channels)  # 1: the lane has seen a peer event
        # Chunk records by location, a chunk of one rank's memory as one int (the rank's input,
        # output and scratch end to end, aliases resolved): kept in C++ (verifier_memory.cpp).
        buffers = plan["buffers"]
        self.buffer_base = {ops.INPUT: 0, ops.OUTPUT: buffers[ops.INPUT],
                            ops.SCRATCH: buffers[ops.INPUT] + buffers[ops.OUTPUT]}
        self.per_rank = self.buffer_base[ops.SCRATCH] + buffers[ops.SCRATCH]
        self.memory = _C.plan.ChunkMemory(
            [buffers[ops.INPUT], buffers[ops.OUTPUT], buffers[ops.SCRATCH]], self.k,
            geometry.alias_kind(self.collective, plan["in_place"]), n, semantics.combine)
        self.banked = plan.get("scratch_banks", 1) == 2  # eager: peers' scratch needs no entry
        # The initial contents, the expected outputs and the writable-input sets: ranks x chunks.
        self._charge(n * (plan["buffers"][ops.INPUT] + 2 * plan["buffers"][ops.OUTPUT])
                     * self.chunk_work, n * plan["buffers"][ops.INPUT])
        for r in range(n):
            for i in range(plan["buffers"][ops.INPUT]):
                self.memory.init(self._key(r, ops.INPUT, i), semantics.input_symbol(r, i))

    # -- memory accesses ------------------------------------------------------------------

    def _op_at(self, op_id: int) -> tuple:
        """(rank, worker, step, op name) of an op as _step numbers it: an access remembers its
        op as one int (a tuple per op was a tenth of the memory of verifying large plans)."""
        rank, worker, step = op_id >> 40, (op_id >> 32) & 0xFF, op_id & 0xFFFFFFFF
        return rank, worker, step, self.plan["ranks"][rank]["workers"][worker]["ops"][step]["op"]

    def _race(self, kind: str, info, other, key) -> None:
        self.memory.race(_RACE_KIND[kind], info, other, key)

    def _needs_entry(self, remote_ref) -> bool:
        """Whether accessing a peer's ``remote_ref`` must wait until that peer entered: always,
        except a peer's scratch in an eager plan (its banks; see the module docstring)."""
        return not (self.banked and remote_ref[0] == ops.SCRATCH)

    def _charge(self, work: int, new_locations: int = 0) -> None:
        """Counts work and checks the memory the verifier would hold with ``new_locations`` more
        chunk records; raises TooLarge past a limit (nothing is counted without limits)."""
        if self.max_work is None and self.max_memory is None:
            return
        self.work += work
        if self.max_work is not None and self.work > self.max_work:
            raise TooLarge(f"proving it takes more than {self.max_work} work units")
        if self.max_memory is not None:
            memory = (self.entries * _BYTES_PER_ENTRY
                      + (len(self.memory) + new_locations) * _BYTES_PER_LOCATION)
            if memory > self.max_memory:
                raise TooLarge(f"proving it takes more than {self.max_memory} bytes of memory "
                               f"({self.entries} vector clock entries, "
                               f"{len(self.memory) + new_locations} chunk records)")

    def _key(self, rank: int, buffer: str, index: int) -> int:
        """The location of chunk ``index`` of ``buffer`` (aliases resolved) on ``rank``."""
        return self.memory.location(rank, (buffer, index))

    def _key_parts(self, key: int) -> tuple:
        """(rank, buffer, index) of a location, for messages."""
        rank, index = divmod(key, self.per_rank)
        for buffer in (ops.SCRATCH, ops.OUTPUT, ops.INPUT):
            if index >= self.buffer_base[buffer]:
                return rank, buffer, index - self.buffer_base[buffer]
        raise AssertionError("negative location")

    def _keys(self, rank: int, ref, count: int) -> int:
        """The first location of ``count`` chunks from ``ref`` on ``rank`` (an alias moves a
        whole buffer, so they are consecutive)."""
        self._charge(count * self.chunk_work, count)
        return self.memory.location(rank, ref)

    def _reduce(self, rank, op, clock, comp, stamp, info, remote=None) -> None:
        """dst = combine(srcs); ``remote`` (get_reduce) adds the peer's chunks as the last
        source, read by this worker itself."""
        count = ops.op_count(op)
        dst = self._keys(rank, op["dst"], count)
        srcs = [self._keys(rank, ref, count) for ref in op["srcs"]]
        if remote is not None:
            srcs.append(remote)
        for src in srcs:
            self._check_overlap(src, dst, count, info)
        self.memory.reduce(dst, srcs, count, clock, comp, stamp, info)

    def _check_overlap(self, src: int, dst: int, count: int, info) -> None:
        """An issue when ``count`` chunks from locations ``src`` and ``dst`` overlap without
        being the same chunks."""
        if src != dst and src < dst + count and dst < src + count:
            where = self._op_at(info)
            self.issues.append(Issue(OVERLAP, *where[:3],
                                     f"{_where(*where)}: source and destination overlap "
                                     f"without being the same chunks"))

    # -- execution ------------------------------------------------------------------------

    # A lane's clock is never stored: a channel belongs to one worker, which issues its events
    # in program order, so at each event the lane's clock equals the worker's clock except in
    # the lane's own component, which counts the lane's events (everything else the lane knows
    # came from the worker earlier, and clocks only grow). _lane_clock lends the worker's clock
    # with that component set, and the caller puts the worker's value back. Memory stays at one
    # clock per worker plus the signals in flight, instead of one clock per channel more.

    def _lane_clock(self, rank: int, ch: int, worker_clock):
        """A channel op issued now: the lane ticks; returns (lane clock, component, stamp,
        the worker's own value of that component to restore)."""
        comp = self.lane_comp[rank][ch]
        channel = self.channel_base[rank] + ch
        stamp = self.lane_events[channel] + 1
        self.lane_events[channel] = stamp
        saved = worker_clock.get(comp)  # None: absent (0), removed again by _restore
        worker_clock[comp] = stamp
        return worker_clock, comp, stamp, saved

    @staticmethod
    def _restore(clock: dict, comp: int, saved) -> None:
        if saved is None:
            del clock[comp]
        else:
            clock[comp] = saved

    def _join_lane(self, rank: int, ch: int, clock, wcomp: int) -> None:
        """Flush (or the end of the worker): everything issued on the lane is done."""
        comp = self.lane_comp[rank][ch]
        events = self.lane_events[self.channel_base[rank] + ch]
        if events > clock.get(comp, 0):
            self.entries += comp not in clock
            clock[comp] = events
            self.logs[wcomp] += (comp, events)

    def _signal(self, rank: int, ch: int, clock, wcomp: int) -> None:
        comp = self.lane_comp[rank][ch]
        channel = self.channel_base[rank] + ch
        stamp = self.lane_events[channel] + 1
        self.lane_events[channel] = stamp
        waiter = self.waiter[channel]
        pair = self._pair(wcomp, -1 if waiter is None else waiter)
        copy = None  # the size of the clock that goes with this signal, the first one of the pair
        if pair not in self.copied:
            self.copied.add(pair)
            self._charge(len(clock) // _ENTRIES_PER_WORK)
            self.entries += len(clock)
            copy = len(clock)
        sent = self.signals[channel]
        if sent is None:
            sent = self.signals[channel] = []
        sent.append((copy, comp, stamp, wcomp, len(self.logs[wcomp])))

    def _put(self, rank, op, ch, src_field, dst_field, clock, info) -> None:
        lane, comp, stamp, saved = self._lane_clock(rank, ch, clock)
        try:
            self._put_with(rank, op, ch, src_field, dst_field, lane, comp, stamp, info)
        finally:
            self._restore(lane, comp, saved)

    def _put_with(self, rank, op, ch, src_field, dst_field, lane, comp, stamp, info) -> None:
        count = ops.op_count(op)
        peer = self.peer[rank][ch]
        remote_ref = op[src_field] if op["op"] == ops.GET else op[dst_field]
        channel = self.channel_base[rank] + ch
        if (peer != rank and self._needs_entry(remote_ref)
                and not self.lanes_after_peer_entered[channel]):
            if lane.get(self.entered[peer], 0):
                self.lanes_after_peer_entered[channel] = 1
            else:
                self._race(EARLY, info, None, self._keys(peer, remote_ref, count))
        src_rank, dst_rank = (peer, rank) if op["op"] == ops.GET else (rank, peer)
        src = self._keys(src_rank, op[src_field], count)
        dst = self._keys(dst_rank, op[dst_field], count)
        if peer == rank:  # a loopback channel moves within this rank's memory, as a copy does
            self._check_overlap(src, dst, count, info)
        self.memory.move(src, dst, count, lane, comp, stamp, info)

    def _pair(self, comp: int, other: int) -> int:
        """Two components (the second may be -1) as one int, a key of joined and copied."""
        return comp * (self.comps.count + 1) + other + 1

    def _tick(self, clock: dict, wcomp: int) -> int:
        """A worker event: its own component counts one more; returns the new count."""
        stamp = clock.get(wcomp, 0) + 1
        self.entries += stamp == 1
        clock[wcomp] = stamp
        self.logs[wcomp] += (wcomp, stamp)
        return stamp

    def _step(self, rank: int, worker: int, step: int, op: dict, clock) -> bool:
        """Runs one op; False when it is a wait that cannot complete yet."""
        name = op["op"]
        info = rank << 40 | worker << 32 | step  # an op, as _op_at reads it back
        wcomp = self.worker_comp[rank][worker]
        ch = op.get("ch")
        if name == ops.WAIT:
            channel = self.channel_base[rank] + ch
            done = self.waits_done[channel]
            sent = self.signals[self.partner[channel]] or ()
            if len(sent) <= done:
                return False
            copy, comp, stamp, sender, logged = sent[done]
            log = self.logs[wcomp]
            before, changes = len(clock), len(log)
            pair = self._pair(wcomp, sender)
            seen = self.joined.get(pair)
            if seen is None and copy is not None:
                self._charge(copy // _ENTRIES_PER_WORK)
                self.comps.join_replayed(rank, clock, self.logs[sender], logged, log)
            elif (seen or 0) < logged:  # (seen >= logged: an older clock than one joined)
                self._charge((logged - (seen or 0)) // (2 * _ENTRIES_PER_WORK))
                self.comps.join_log(rank, clock, self.logs[sender], seen or 0, logged, log)
            self.joined[pair] = max(seen or 0, logged)
            if copy is not None:
                self.entries -= copy
            if stamp > clock.get(comp, 0) and self.comps.keeps(rank, comp):
                clock[comp] = stamp
                log += (comp, stamp)
            self.entries += len(clock) - before + (len(log) - changes) // _ENTRIES_PER_LOGGED
            sent[done] = None
            self.waits_done[channel] = done + 1
            self._tick(clock, wcomp)
        elif name == ops.SIGNAL:
            self._signal(rank, ch, clock, wcomp)
        elif name == ops.FLUSH:
            self._join_lane(rank, ch, clock, wcomp)
            self._tick(clock, wcomp)
        elif name in (ops.PUT, ops.PUT_SIGNAL, ops.GET):
            self._put(rank, op, ch, "src", "dst", clock, info)
            if name == ops.PUT_SIGNAL:
                self._signal(rank, ch, clock, wcomp)
        elif name == ops.COPY:
            stamp = self._tick(clock, wcomp)
            count = ops.op_count(op)
            src, dst = self._keys(rank, op["src"], count), self._keys(rank, op["dst"], count)
            self._check_overlap(src, dst, count, info)
            self.memory.move(src, dst, count, clock, wcomp, stamp, info)
        elif name == ops.GET_REDUCE:
            # The worker reads the peer's memory itself, synchronously: a worker event (no
            # lane, no flush), which must come after the peer entered.
            stamp = self._tick(clock, wcomp)
            peer = self.peer[rank][ch]
            remote = self._keys(peer, op["src"], ops.op_count(op))
            if (peer != rank and self._needs_entry(op["src"])
                    and not clock.get(self.entered[peer], 0)):
                self._race(EARLY, info, None, remote)
            self._reduce(rank, op, clock, wcomp, stamp, info, remote)
        elif name in (ops.REDUCE_OP, ops.REDUCE_PUT):
            stamp = self._tick(clock, wcomp)
            self._reduce(rank, op, clock, wcomp, stamp, info)
            if name == ops.REDUCE_PUT:
                self._put(rank, op, ch, "dst", "remote", clock, info)
        else:  # validation rejects unknown ops; this guards against ops.py growing alone
            raise AssertionError(f"verifier has no rule for op {name!r}")
        return True

    def run(self) -> VerifyResult:
        ranks = self.plan["ranks"]
        workers = [(r, w) for r in range(self.nranks) for w in range(len(ranks[r]["workers"]))]
        # Every worker starts having seen its rank enter (clocks.py).
        clocks = {rw: {self.entered[rw[0]]: 1} for rw in workers}
        self.entries += len(clocks)
        self.logs = {self.worker_comp[r][w]: [self.entered[r], 1] for r, w in workers}
        pc = dict.fromkeys(workers, 0)
        base = self.channel_base
        owner: list = [None] * len(self.partner)  # channel -> the worker using it (None: none)
        for r, w in workers:
            for op in ranks[r]["workers"][w]["ops"]:
                if "ch" in op:
                    owner[base[r] + op["ch"]] = w
        # channel -> the worker component that waits on its partner (None: no worker does)
        self.waiter = [None] * len(self.partner)
        for channel, other in enumerate(self.partner):
            w = owner[other]
            if w is not None:
                self.waiter[channel] = self.worker_comp[_rank_channel(base, other)[0]][w]
        blocked_on = {}  # channel whose partner signal is awaited -> (rank, worker)
        runnable = deque(workers)
        executed = 0
        while runnable:
            r, w = runnable.popleft()
            op_list = ranks[r]["workers"][w]["ops"]
            clock = clocks[(r, w)]
            while pc[(r, w)] < len(op_list):
                step = pc[(r, w)]
                op = op_list[step]
                self._charge(self.op_work)
                if not self._step(r, w, step, op, clock):
                    blocked_on[self.partner[base[r] + op["ch"]]] = (r, w)
                    break
                pc[(r, w)] = step + 1
                executed += 1
                if op["op"] in (ops.SIGNAL, ops.PUT_SIGNAL):
                    waiter = blocked_on.pop(base[r] + op["ch"], None)
                    if waiter is not None:
                        runnable.append(waiter)
        stuck = [rw for rw in workers if pc[rw] < len(ranks[rw[0]]["workers"][rw[1]]["ops"])]
        self.issues.extend(self.balance)
        if stuck:
            self._report_deadlock(stuck, pc, owner, ranks)
        # The end of a worker flushes its channels; a rank is done when all its workers are.
        for r in range(self.nranks):
            for ch in range(len(ranks[r]["channels"])):
                w = owner[base[r] + ch]
                if w is not None:
                    self._join_lane(r, ch, clocks[(r, w)], self.worker_comp[r][w])
        finished = [{} for _ in range(self.nranks)]
        for (r, w), clock in clocks.items():
            done = finished[r]
            for comp, value in clock.items():
                if value > done.get(comp, 0):
                    done[comp] = value
        self._report_races()
        if not stuck:
            self._check_unfinished(finished)
            self._check_outputs()
            if self.collective == ops.BARRIER or self.banked:
                self._check_barrier(finished)
        return VerifyResult(self.name, self.issues, executed)

    # -- reports --------------------------------------------------------------------------

    def _report_deadlock(self, stuck, pc, owner, ranks) -> None:
        for r, w in stuck:
            step = pc[(r, w)]
            ch = ranks[r]["workers"][w]["ops"][step]["ch"]
            channel = self.channel_base[r] + ch
            other_channel = self.partner[channel]
            p, pch = _rank_channel(self.channel_base, other_channel)
            needed = self.waits_done[channel] + 1
            sent = len(self.signals[other_channel] or ())
            other = owner[other_channel]
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
        for kind_index, op_id, other, locations in self.memory.take_races():
            kind = _RACE_KINDS[kind_index]
            keys = [self._key_parts(key) for key in locations]
            info = self._op_at(op_id)
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
                           f"{_where(*self._op_at(other))}: no signal/wait orders them")
            self.issues.append(Issue(kind, rank, worker, step, message))

    def _check_unfinished(self, finished) -> None:
        for op_id, locations in self.memory.late(finished):
            keys = [self._key_parts(key) for key in locations]
            info = self._op_at(op_id)
            self.issues.append(Issue(
                UNFINISHED, info[0], info[1], info[2],
                f"{_where(*info)}: its access to {_describe_keys(keys)} may still be in flight "
                f"when rank {keys[0][0]} returns (no signal/wait orders it before that rank's "
                f"end)"))

    def _check_outputs(self) -> None:
        # all_reduce and broadcast expect the same outputs on every rank, and copies pass
        # contents on by reference, so most ranks hold the very objects compared before: such a
        # comparison is made once per (content, chunk), not per rank (a 1,024-rank all_reduce has
        # a 1,024-term content in each of its 1,024 output chunks on every rank). The contents
        # compared stay alive in self.memory meanwhile, so their ids are not reused.
        shared = None
        same: dict = {}
        for r in range(self.nranks):
            if shared is not None:
                expected = shared
            else:
                expected = semantics.expected_outputs(self.collective, self.nranks, self.k, r,
                                                      self.plan.get("root"))
                if self.collective in (ops.ALL_REDUCE, ops.BROADCAST):
                    shared = expected
            for i, want in enumerate(expected):
                if want is None:
                    continue
                got = self.memory.value(self._key(r, ops.OUTPUT, i))
                if shared is None:
                    equal = got == want
                else:
                    equal = same.get((id(got), i))
                    if equal is None:
                        equal = same[(id(got), i)] = got == want
                if not equal:
                    self.issues.append(Issue(
                        WRONG_RESULT, r, None, None,
                        f"rank {r} output chunk {i}: expected {semantics.describe(want)}, "
                        f"got {semantics.describe(got)}"))

    def _check_barrier(self, finished) -> None:
        for r in range(self.nranks):
            for q in range(self.nranks):
                if q != r and not finished[r].get(self.entered[q], 0):
                    what = ("an eager call (scratch_banks 2), and the next one could overwrite "
                            f"a scratch bank rank {q} still reads" if self.banked else "the barrier")
                    self.issues.append(Issue(
                        NOT_SYNCHRONIZED, r, None, None,
                        f"rank {r} can finish {what} before rank {q} has started it"))


def _channel_numbers(plan: dict) -> tuple[list, list]:
    """The channels of a valid plan by global number (rank r's channel c is base[r] + c):
    (base, partner), partner[number] the number of the channel it pairs with. The i-th channel
    r->p pairs with the i-th p->r; loopback channels pair up in id order (0 with 1, 2 with 3,
    ...). Lists, not dicts of (rank, channel) tuples: a 1,024-rank forest plan has a million."""
    base, total = [], 0
    for entry in plan["ranks"]:
        base.append(total)
        total += len(entry["channels"])
    by_pair: dict = {}
    for r, entry in enumerate(plan["ranks"]):
        for c, channel in enumerate(entry["channels"]):
            by_pair.setdefault((r, channel["peer"]), []).append(base[r] + c)
    partner = [-1] * total  # -1: unpaired (an invalid plan)
    for (r, p), chans in by_pair.items():
        if r == p:
            for a, b in zip(chans[0::2], chans[1::2]):
                partner[a], partner[b] = b, a
        else:
            for a, b in zip(chans, by_pair.get((p, r), ())):
                partner[a] = b
    if -1 in partner:  # as a list index, -1 would silently name the last channel
        rank, ch = _rank_channel(base, partner.index(-1))
        raise ValueError(f"not a valid plan: rank {rank} channel {ch} has no partner channel "
                         f"(validate the plan first)")
    return base, partner


def _rank_channel(base: list, number: int) -> tuple[int, int]:
    """(rank, channel id) of a channel's global number."""
    rank = bisect_right(base, number) - 1
    return rank, number - base[rank]


def balance_issues(plan: dict, numbers: tuple | None = None) -> list[Issue]:
    """The cheap static part of the proof, for a valid plan: on every channel pair, the signals
    one side sends (signal, put_signal) equal the waits of the other. Semaphores count on across
    slices and calls, so an imbalance mismatches the next slice or the next call. Linear in the
    plan's size; the executor checks the same when it compiles a plan. ``numbers``:
    _channel_numbers(plan), when the caller has it."""
    base, partner = _channel_numbers(plan) if numbers is None else numbers
    sent, waited = [0] * len(partner), [0] * len(partner)
    for r, entry in enumerate(plan["ranks"]):
        first = base[r]
        for worker in entry["workers"]:
            for op in worker["ops"]:
                name = op["op"]
                if name == ops.SIGNAL or name == ops.PUT_SIGNAL:
                    sent[first + op["ch"]] += 1
                elif name == ops.WAIT:
                    waited[partner[first + op["ch"]]] += 1
    issues = []
    for number, (signals, waits) in enumerate(zip(sent, waited)):
        if signals != waits:
            (r, c), (p, pc) = _rank_channel(base, number), _rank_channel(base, partner[number])
            issues.append(Issue(
                UNBALANCED, r, None, None,
                f"rank {r} channel {c} signals {signals} time(s) but its partner, "
                f"rank {p} channel {pc}, waits {waits} time(s); semaphores count "
                f"on across slices and calls, so the next slice or call would be mismatched"))
    return issues


def _describe_keys(keys) -> str:
    """'rank 1 output chunks 0..3' style summary of (rank, buffer, index) keys."""
    keys = sorted(set(keys))
    rank, buffer, first = keys[0]
    same = [i for r, b, i in keys if (r, b) == (rank, buffer)]
    span = f"chunk {first}" if len(same) == 1 else f"chunks {same[0]}..{same[-1]}"
    extra = f" (and {len(keys) - len(same)} more locations)" if len(keys) > len(same) else ""
    return f"rank {rank} {buffer} {span}{extra}"


def verify(plan: dict, name: str | None = None, *, max_work: int | None = None,
           max_memory: int | None = None, validated: bool = False) -> VerifyResult:
    """Checks a plan: structure, deadlock freedom, races, in-flight accesses, input left intact,
    uninitialized reads and, finally, the output against the collective's definition.

    ``max_work`` (units of under a microsecond) and ``max_memory`` (bytes) bound the effort:
    past either, TooLarge is raised instead of a result. The effort is counted, not timed, so
    every rank and machine decides alike. ``validated``: the caller has just validated this
    plan (format.validate), so the structural checks are skipped."""
    with paused_gc():  # chunk records and clocks: millions of objects at 1,024 ranks
        return _verify(plan, name, max_work, max_memory, validated)


def _verify(plan, name, max_work, max_memory, validated) -> VerifyResult:
    label = name or (plan.get("name") if isinstance(plan, dict) else None) or "<plan>"
    errors = [] if validated else plan_format.validation_errors(plan, label)
    if errors:
        return VerifyResult(label, [Issue(INVALID, None, None, None, e) for e in errors])
    first = _Verifier(plan, label, max_work, max_memory)
    result = first.run()
    if first.comps.project and result.kinds() & _CLOCK_KINDS:
        # Projected clocks (clocks.py) never miss an ordering problem but may
        # report one that a third rank's relay resolves (clocks.py): confirm with full clocks,
        # within what is left of the budget.
        left = None if max_work is None else max_work - first.work
        result = _Verifier(plan, label, left, max_memory, project=False).run()
    return result
