"""Spanning trees -> plans: all_gather down the trees, reduce_scatter up them, all_reduce up then down.

The input is a list of ``TreeSpec``: a root, its arcs (parent, child) with parents before children,
the chunks the tree carries and, optionally, the physical route of every arc. ForestColl forests
(forest_plan.py) and the double binary tree baseline (baselines.py) compile through here.

Chunks. all_gather and reduce_scatter trees carry parts ``first .. first+count-1`` of their root's
block (chunks_per_block = k parts per block); all_reduce trees carry vector chunks
``first .. first+count-1`` (one block of chunks_per_block chunks). A tree's data is never split:
the trees of one root tile its block, so each chunk travels down (or up) exactly one tree.

Segments. Consecutive trees (in list order) of one root that carry adjacent chunks and share an
arc p -> c with the same route travel that arc as one put: a *segment*. At the root the segments
are runs of its trees per child; a rank forwards each segment it receives as runs per child of the
trees in it. Every segment is one put_signal one way (down) or one reduce+put+signal the other way
(up), so a forest of many trees per root needs far fewer ops than arcs x trees.

Phases. Down (all_gather, second half of all_reduce): a rank waits for a segment from its parent
and puts the runs on to its children, straight from output to output. Up (reduce_scatter, first
half of all_reduce): a rank waits for its children's partial sums of a segment (landing in its
scratch, one slot per child segment, aligned with the data's parts so chunk sizes match), reduces
them with its own input and puts the result into its parent's slot; the root reduces into its
output. Reductions take at most MAX_REDUCE_SOURCES sources per op (longer ones are folded).

Workers ("mode"):

* ``"pipelined"`` (default): per rank, one worker per depth the rank has in the trees (or per
  group of consecutive depths, as few as keep every rank within MAX_CHANNELS_PER_PEER channels
  to a peer), which receives what arrives there and forwards it (in the up phase: reduces and
  sends it up), plus a root sender (and, for the up phase, a root reducer). A segment's trees
  share their path from the root, so a worker's segments are (about) equally deep and arrive at
  about the same time: finishing a slice never waits for much deeper data, and slices pipeline
  down and up the trees. all_reduce's root sender starts after the root's reducer, through a
  loopback pair. Every worker orders its segments (depth, tree) down and (-depth, tree) up, so
  each wait depends only on items earlier in that order everywhere: deadlock-free. About two
  workers per tree level and rank: GPU thread blocks rather than CPU threads.
* Lanes (pipelined only): a link shares its bandwidth equally among the transfers on it and a
  channel has one transfer at a time, so a worker pair that carries more chunks per slice than
  another on the same link gets less than its share, and its data falls behind (on mi250x4, whose
  links are nearly all critical, this was most of the 12% lost to the bound). Each rank pair's
  channels left under MAX_CHANNELS_PER_PEER go, one at a time, to its worker pair with the most
  chunks per lane, until every lane carries one chunk per slice (the link then shares by bytes)
  or the channels run out; such a pair puts its chunks of a slice over its lanes in equal parts (a
  put per segment and lane), and the up phase mirrors it.
  Only pairs joined by one link (two-node routes): a switch's links are shared by other rank
  pairs, whose transfers would lose their share to the lanes.
* ``"compact"``: one worker per rank does everything in the same order (the up phase first),
  plus the doorman below: two threads per rank, for CPUs and small messages. A rank finishes a
  slice before starting the next, so its deepest data holds back the next slice: big messages
  move slower, and compact plans get one slice unless told otherwise.

Entry and exit. Each rank that receives puts has a *doorman* worker whose only ops are signals,
one on an entry channel to every worker that puts into the rank; that worker waits on it before
its first put to the rank. The doorman never waits, so it runs through all slices at once: entry
costs one latency per call and never holds a later slice back (slices touch disjoint sub-ranges of
every chunk, so they need no flow control; an entry handshake per slice would allow only one
slice in flight per channel and add a round trip to every slice). Every put is followed by a
signal that the receiver waits for, so all writes into a rank are done before it returns.
Signals and waits balance per channel pair and slice.

Engines. The op emission above runs in C++ by default (``engine="native"``:
cpp/src/plan/tree_compiler.cpp, the same steps in the same order, through
``forestcc._C.plan.compile_trees``); this module's Python is the reference (``engine="python"``)
and documents the algorithm. Both give the same plan, op for op (tests/test_tree_compiler_native.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

from forestcc import _C

from ..plan import PlanBuilder
from ..plan import ops as plan_ops

__all__ = ["ENGINES", "MAX_CHANNELS_PER_PEER", "MAX_REDUCE_SOURCES", "MODES", "TreeSpec",
           "compile_trees", "single_link"]

IN, OUT, SCR = plan_ops.INPUT, plan_ops.OUTPUT, plan_ops.SCRATCH
MODES = ("pipelined", "compact")
ENGINES = ("native", "python")
COLLECTIVES = (plan_ops.ALL_GATHER, plan_ops.REDUCE_SCATTER, plan_ops.ALL_REDUCE)
# The C++ op record holds at most this many reduction sources (plan.hpp kMaxReduceSources).
MAX_REDUCE_SOURCES = 8
# The executor takes at most this many channels from a rank to one peer (kMaxPlanChannelsPerPeer).
MAX_CHANNELS_PER_PEER = 64
_REF_FIELDS = frozenset(plan_ops.REF_FIELDS)
_PUTS = frozenset((plan_ops.PUT, plan_ops.PUT_SIGNAL, plan_ops.REDUCE_PUT))
_NONE: dict = {}


@dataclass(frozen=True)
class TreeSpec:
    """One tree: ``arcs`` (parent, child) with parents before children, carrying chunks
    ``first .. first+count-1``; ``routes[i]`` is arc i's physical node path from parent to child
    (None: let the runtime or the simulator choose)."""
    root: int
    arcs: tuple[tuple[int, int], ...]
    first: int
    count: int
    routes: tuple[tuple[str, ...], ...] | None = None


class _Segment:
    """Trees ``trees`` (consecutive, adjacent chunks lo..hi-1) crossing the arc sender -> receiver
    (down direction) as one put. ``parent`` is the segment that brought them to the sender;
    ``depth`` is the receiver's depth in these trees. (A plain class with slots: a 1,024-rank
    forest has a million segments.)"""
    __slots__ = ("sender", "receiver", "trees", "lo", "hi", "route", "back", "parent", "depth",
                 "children")

    def __init__(self, sender: int, receiver: int, trees: list, lo: int, hi: int,
                 route: tuple | None, parent: _Segment | None, depth: int = 1):
        self.sender, self.receiver, self.trees = sender, receiver, trees
        self.lo, self.hi, self.route, self.parent, self.depth = lo, hi, route, parent, depth
        self.back = _reverse(route)  # the route up, receiver -> sender
        self.children: list = []


def _runs(tree_ids, trees, children, routes, node, child):
    """Maximal runs of consecutive trees in tree_ids where `child` is a child of `node`, with the
    same route and adjacent chunks: [(trees, route)]."""
    runs = []
    for t in tree_ids:
        if child not in children[t].get(node, _NONE):
            continue
        route = routes[t].get((node, child))
        if runs:
            last_trees, last_route = runs[-1]
            prev = trees[last_trees[-1]]
            if (last_trees[-1] == t - 1 and last_route == route
                    and prev.first + prev.count == trees[t].first):
                last_trees.append(t)
                continue
        runs.append(([t], route))
    return runs


def _segments(trees: Sequence[TreeSpec]):
    """Root segments per root, built outwards; returns the list of all segments (parents first)."""
    children = []  # tree -> node -> {child: None} in arc order
    routes = []    # tree -> (parent, child) -> route
    for spec in trees:
        kids: dict = {}
        arc_routes: dict = {}
        for i, (p, c) in enumerate(spec.arcs):
            kids.setdefault(p, {})[c] = None  # a dict: ordered, and membership in O(1)
            arc_routes[(p, c)] = tuple(spec.routes[i]) if spec.routes is not None else None
        children.append(kids)
        routes.append(arc_routes)
    by_root: dict = {}
    for t, spec in enumerate(trees):
        by_root.setdefault(spec.root, []).append(t)
    out = []

    def make(sender, receiver, run, route, parent):
        seg = _Segment(sender, receiver, run, trees[run[0]].first,
                       trees[run[-1]].first + trees[run[-1]].count, route, parent,
                       parent.depth + 1 if parent is not None else 1)
        out.append(seg)
        if parent is not None:
            parent.children.append(seg)
        return seg

    frontier = []
    for root, ids in by_root.items():
        first_seen = dict.fromkeys(c for t in ids for c in children[t].get(root, ()))
        for c in first_seen:
            for run, route in _runs(ids, trees, children, routes, root, c):
                frontier.append(make(root, c, run, route, None))
    while frontier:
        next_frontier = []
        for seg in frontier:
            x = seg.receiver
            first_seen = dict.fromkeys(c for t in seg.trees for c in children[t].get(x, ()))
            for c in first_seen:
                for run, route in _runs(seg.trees, trees, children, routes, x, c):
                    next_frontier.append(make(x, c, run, route, seg))
        frontier = next_frontier
    return out


class _ScratchSlots:
    """Per-rank scratch allocation in whole blocks per part, so a slot for parts lo..hi-1 lies at
    parts lo..hi-1 of some scratch block and its chunks have the data's sizes."""

    def __init__(self, nranks: int, k: int):
        self.k = k
        self.next_block = [[0] * k for _ in range(nranks)]

    def alloc(self, rank: int, lo: int, hi: int) -> int:
        free = self.next_block[rank]
        block = max(free[lo:hi])
        for p in range(lo, hi):
            free[p] = block + 1
        return block * self.k + lo


class _Program:
    """Abstract per-worker op lists; channels created on first use, entry handshakes added last."""

    def __init__(self, builder: PlanBuilder, mode: str):
        self.b = builder
        self.mode = mode
        self.worker_ids: dict = {}   # (rank, key) -> worker id
        self.items: dict = {}        # (rank, worker id) -> [op dict]
        self.pairs: dict = {}        # (a, wa, b, wb, route_ab) -> channel(...)'s answer
        self.channels: dict = {}     # channel key -> (ch on a, ch on b)
        self.owner: dict = {}        # (rank, ch) -> worker id
        self.sends_to: set = set()   # (rank, worker, peer): the worker puts into the peer
        self.peer_of: dict = {}      # (rank, ch) -> peer rank
        self.routes: dict = {}       # (rank, ch) -> route from rank to peer
        self.loopbacks: dict = {}    # (rank, from worker, to worker) -> loopback pair
        self.scratch_end = 0         # chunks of scratch the ops reach (the builder is told)

    def worker(self, rank: int, key) -> int:
        if self.mode == "compact":
            key = 0
        wid = self.worker_ids.get((rank, key))
        if wid is None:
            wid = self.worker_ids[(rank, key)] = self.b.worker(rank)
            self.items[(rank, wid)] = []
        return wid

    def channel(self, a: int, wa: int, b: int, wb: int, route_ab,
                lane: int = 0) -> tuple[int, int]:
        """The channel pair joining worker wa of rank a and worker wb of rank b whose data a -> b
        takes route_ab (b -> a: its reverse), the pair's lane `lane` (see _lanes); (ch on a,
        ch on b)."""
        asked = (a, wa, b, wb, route_ab, lane)
        answer = self.pairs.get(asked)
        if answer is None:
            answer = self.pairs[asked] = self._channel(a, wa, b, wb, route_ab, lane)
        return answer

    def _channel(self, a: int, wa: int, b: int, wb: int, route_ab, lane) -> tuple[int, int]:
        flip = (b, wb) < (a, wa)
        if flip:
            key = ((b, wb), (a, wa), tuple(reversed(route_ab)) if route_ab else None, lane)
        else:
            key = ((a, wa), (b, wb), route_ab, lane)
        pair = self.channels.get(key)
        if pair is None:
            (x, wx), (y, wy), _, _ = key
            pair = self.channels[key] = self.b.channel_pair(x, y)
            self.owner[(x, pair[0])] = wx
            self.owner[(y, pair[1])] = wy
            self.peer_of[(x, pair[0])], self.peer_of[(y, pair[1])] = y, x
        return (pair[1], pair[0]) if flip else pair

    def handover(self, rank: int, from_worker: int, to_worker: int) -> None:
        """from_worker signals to_worker over a loopback pair of its rank (nothing when they are
        the same worker: program order is enough)."""
        if from_worker == to_worker:
            return
        pair = self.loopbacks.get((rank, from_worker, to_worker))
        if pair is None:
            pair = self.loopbacks[(rank, from_worker, to_worker)] = self.b.channel_pair(rank, rank)
            self.owner[(rank, pair[0])], self.owner[(rank, pair[1])] = from_worker, to_worker
        self.add(rank, from_worker, "signal", ch=pair[0])
        self.add(rank, to_worker, "wait", ch=pair[1])

    def add(self, rank: int, wid: int, method: str, **fields) -> None:
        """Queues an op for the worker: the builder's op dict (refs as lists), made once."""
        op = {"op": method}
        for name, value in fields.items():
            if name == "n" and value == plan_ops.DEFAULT_N:
                continue  # left out, as the builder writes it
            if name == "srcs":
                value = [list(ref) for ref in value]
            elif name in _REF_FIELDS:
                value = list(value)
            op[name] = value
        self.items[(rank, wid)].append(op)

    def note_put(self, rank: int, ch: int, route) -> None:
        self.sends_to.add((rank, self.owner[(rank, ch)], self.peer_of[(rank, ch)]))
        if route is not None:
            self.routes[(rank, ch)] = route

    def emit(self) -> None:
        """Writes the ops into the builder, with the entry handshake: every rank that receives
        puts gets a doorman worker that only signals, once per slice, on an entry channel to each
        worker that puts into it; that worker waits on it before its first put to the rank. With
        no waits of its own the doorman runs through all slices at once, so entry costs one
        latency per call and never holds back a later slice (slices use disjoint sub-ranges of
        every chunk, so they need no flow control)."""
        entry: dict = {}  # (rank, worker, peer) -> entry channel on rank
        doormen: dict = {}
        for rank, wid, peer in sorted(self.sends_to):
            door = doormen.get(peer)
            if door is None:
                door = doormen[peer] = self.b.worker(peer)
                self.items[(peer, door)] = []
            mine, theirs = self.b.channel_pair(rank, peer)
            entry[(rank, wid, peer)] = mine
            self.items[(peer, door)].append({"op": plan_ops.SIGNAL, "ch": theirs})
        # Straight into the builder's lists (millions of ops): they are made as it writes them
        # (n left out when 1), and it is told how far into scratch they reach.
        for (rank, wid), items in self.items.items():
            out = self.b.ops_of(rank, wid)
            entered = set()
            for op in items:
                if op["op"] in _PUTS:
                    peer = self.peer_of[(rank, op["ch"])]
                    if peer not in entered:
                        entered.add(peer)
                        out.append({"op": plan_ops.WAIT, "ch": entry[(rank, wid, peer)]})
                out.append(op)
        self.b.reach_scratch(self.scratch_end)


def compile_trees(collective: str, nranks: int, trees: Sequence[TreeSpec],
                  chunks_per_block: int, *, mode: str = "pipelined", in_place: bool = False,
                  name: str | None = None,
                  max_channels_per_peer: int = MAX_CHANNELS_PER_PEER,
                  engine: str = "native", lanes: bool = True) -> tuple[PlanBuilder, dict]:
    """Builds the plan's ranks into a PlanBuilder; returns it with the channel routes
    ({(rank, ch): node path}) for the provenance. The caller calls builder.build(...).
    Pipelined workers span as few tree levels as keep max_channels_per_peer. engine: "native"
    (C++) or "python" (the reference); the same plan either way. lanes: spread heavy worker
    pairs over the spare channels (see the module docstring; False: one channel each)."""
    if collective not in COLLECTIVES:
        raise ValueError(f"tree plans implement {', '.join(COLLECTIVES)}, not {collective!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    k = chunks_per_block
    _check_tiling(collective, nranks, trees, k)
    b = PlanBuilder(collective, nranks, chunks_per_block=k, in_place=in_place,
                    name=name or f"tree_{collective}_{nranks}")
    if engine == "native":
        return b, _compile_native(b, trees, mode, max_channels_per_peer, lanes)
    prog = _Program(b, mode)
    segments = _segments(trees)
    root_of = {id(s): trees[s.trees[0]].root for s in segments}
    # Fewest levels per worker (1: a worker per depth) that keeps every peer within the
    # executor's channel limit.
    levels = 1
    while True:
        send_key, recv_key = _down_keys(segments, levels)
        if (mode == "compact" or _channels_per_peer(collective, segments, send_key, recv_key,
                                                    mode) <= max_channels_per_peer
                or levels > max(s.depth for s in segments)):
            break
        levels += 1
    spread = _NONE
    if lanes and mode != "compact":
        used = _channels_per_pair(collective, segments, send_key, recv_key, mode)
        spread = _lanes(segments, send_key, recv_key, used, max_channels_per_peer,
                        2 if collective == plan_ops.ALL_REDUCE else 1)
    if collective != plan_ops.ALL_GATHER:
        _up_phase(prog, collective, nranks, segments, root_of, k, in_place, recv_key, send_key,
                  spread)
    if collective != plan_ops.REDUCE_SCATTER:
        _down_phase(prog, collective, segments, root_of, k, in_place, send_key, recv_key, spread)
    prog.emit()
    return b, prog.routes


def _compile_native(b: PlanBuilder, trees, mode, max_channels_per_peer, lanes=True) -> dict:
    """The ranks built by _C.plan.compile_trees into b; returns the channel routes. Routes go to
    C++ as ids (equal paths, equal ids) with the id of each one's reverse."""
    ids: dict = {}
    paths: list = []

    def intern(path: tuple) -> int:
        found = ids.get(path)
        if found is None:
            found = ids[path] = len(paths)
            paths.append(path)
        return found

    specs = [(spec.root, spec.first, spec.count, spec.arcs,
              None if spec.routes is None else [intern(tuple(r)) for r in spec.routes])
             for spec in trees]
    reverse = []
    while len(reverse) < len(paths):  # reversing may add paths: their reverses follow
        reverse.append(intern(tuple(reversed(paths[len(reverse)]))))
    # one link: its worker pairs may take lanes
    direct = [int(lanes and single_link(path)) for path in paths]
    channels, workers, channel_routes, scratch = _C.plan.compile_trees(
        b.collective, b.nranks, b.chunks_per_block, mode == "compact", b.in_place,
        max_channels_per_peer, specs, reverse, direct)
    b.take_ranks(channels, workers)
    b.reach_scratch(scratch)
    return {(rank, ch): paths[route] for rank, table in enumerate(channel_routes)
            for ch, route in enumerate(table) if route >= 0}


def _check_tiling(collective, nranks, trees, k):
    """Every chunk is carried by exactly one tree (per root for all_gather/reduce_scatter), and
    every tree spans all ranks."""
    covered: dict = {}
    for t, spec in enumerate(trees):
        reached = {spec.root}
        for p, c in spec.arcs:
            if p not in reached or c in reached:
                raise ValueError(f"tree {t}: arc {p}->{c} out of order")
            reached.add(c)
        if reached != set(range(nranks)):
            raise ValueError(f"tree {t} (root {spec.root}) does not span all {nranks} ranks")
        if spec.count < 1 or spec.first < 0 or spec.first + spec.count > k:
            raise ValueError(f"tree {t}: chunks {spec.first}..{spec.first + spec.count - 1} "
                             f"outside 0..{k - 1}")
        owner = None if collective == plan_ops.ALL_REDUCE else spec.root
        for chunk in range(spec.first, spec.first + spec.count):
            if (owner, chunk) in covered:
                raise ValueError(f"trees {covered[(owner, chunk)]} and {t} both carry chunk "
                                 f"{chunk}" + (f" of rank {owner}" if owner is not None else ""))
            covered[(owner, chunk)] = t
    owners = [None] if collective == plan_ops.ALL_REDUCE else range(nranks)
    for owner in owners:
        missing = [c for c in range(k) if (owner, c) not in covered]
        if missing:
            raise ValueError(f"no tree carries chunk {missing[0]}"
                             + (f" of rank {owner}" if owner is not None else ""))


def _result_ref(collective, root, chunk, k):
    """Where a chunk's final value lives on every rank (all_reduce, all_gather), or on the root
    (reduce_scatter)."""
    if collective == plan_ops.ALL_GATHER:
        return (OUT, root * k + chunk)
    return (OUT, chunk)


def _input_ref(collective, root, chunk, k):
    """A rank's own contribution to a chunk of `root`'s tree."""
    if collective == plan_ops.REDUCE_SCATTER:
        return (IN, root * k + chunk)
    return (IN, chunk)


def _up_phase(prog, collective, nranks, segments, root_of, k, in_place, down_key,
              send_key=_NONE, lanes=_NONE):
    """Partial sums flow child -> parent; the root reduces into its output.

    The up worker that mirrors a down channel takes, for each segment S that came down it, the
    partial sums of S's child segments (each from the up worker of the child's down channel),
    reduces every piece of S's chunks that has some into the first one's slot, and puts every
    piece (reduced, or its own input where no child contributes) into the slot S's sender keeps
    for S, then signals. The root's reducer does the same into the output."""
    slots = _ScratchSlots(nranks, k)
    slot_of = {id(seg): slots.alloc(seg.sender, seg.lo, seg.hi) for seg in segments}
    # Each slot is written whole (the pieces of a segment cover its chunks), so this is how far
    # the ops reach into scratch.
    prog.scratch_end = max((slot_of[id(s)] + s.hi - s.lo for s in segments), default=0)
    by_root: dict = {}
    for seg in segments:
        if seg.parent is None:
            by_root.setdefault(seg.sender, []).append(seg)
    # (last tree, rank, segment sent up or None at the root, contributions, lo, hi, root)
    # Deepest first, then by last tree: the order partial sums arrive in, and deadlock-free (an
    # item waits only for items one level deeper, which come earlier everywhere).
    items = [((-seg.depth, seg.trees[-1]), seg.receiver, seg, seg.children, seg.lo, seg.hi,
              root_of[id(seg)]) for seg in segments]
    for root, segs in by_root.items():
        items.append(((0, max(s.trees[-1] for s in segs)), root, None, segs,
                      min(s.lo for s in segs), max(s.hi for s in segs), root))
    items.sort(key=lambda item: (item[0], item[1]))
    up_key = _up_keys(segments, down_key)
    placed: dict = {}  # as in _down_phase, for the mirrored worker pairs
    sent_on: dict = {}  # id(segment) -> the lanes its partial sums went up on
    for _, x, sent, contributions, lo, hi, root in items:
        w = prog.worker(x, _UP_ROOT if sent is None else up_key[id(sent)])
        incoming = sorted(contributions, key=lambda s: (s.trees[-1], s.receiver))
        queued = prog.items[(x, w)]
        for child in incoming:
            child_w = prog.worker(child.receiver, up_key[id(child)])
            for lane in sent_on.pop(id(child)):
                _, ch = prog.channel(child.receiver, child_w, x, w, child.back, lane)
                queued.append({"op": plan_ops.WAIT, "ch": ch})
        bounds = sorted({lo, hi} | {s.lo for s in incoming} | {s.hi for s in incoming})
        pieces = []  # (first chunk, chunks, slots of the contributions)
        for a, z in zip(bounds, bounds[1:]):
            srcs = [(SCR, slot_of[id(s)] + a - s.lo) for s in incoming if s.lo <= a and z <= s.hi]
            pieces.append((a, z - a, srcs))
        if sent is None:  # the root: reduce into the output
            for a, n, srcs in pieces:
                own, dst = _input_ref(collective, root, a, k), _result_ref(collective, root, a, k)
                if srcs:
                    _reduce(prog, x, w, dst, [own] + srcs, n)
                elif not in_place:
                    prog.add(x, w, "copy", src=own, dst=dst, n=n)
            continue
        parent_w = prog.worker(sent.sender, _UP_ROOT if sent.parent is None
                               else up_key[id(sent.parent)])
        mirrored = (sent.sender, send_key.get(id(sent)), x, down_key[id(sent)], sent.route)
        used_lanes = sent_on[id(sent)] = []
        for lane, la, lz in _lane_pieces(lanes, placed, mirrored, lo, hi):
            ch_up, _ = prog.channel(x, w, sent.sender, parent_w, sent.back, lane)
            used_lanes.append(lane)
            for a, n, srcs in pieces:
                b, z = max(a, la), min(a + n, lz)
                if b >= z:
                    continue
                own = _input_ref(collective, root, b, k)
                remote = (SCR, slot_of[id(sent)] + b - sent.lo)
                if srcs:
                    srcs_here = [(buf, index + b - a) for buf, index in srcs]
                    _reduce(prog, x, w, srcs_here[0], srcs_here + [own], z - b, ch=ch_up,
                            remote=remote)
                else:
                    prog.add(x, w, "put", ch=ch_up, src=own, dst=remote, n=z - b)
            prog.note_put(x, ch_up, sent.back)
            _signal_after(prog, x, w, ch_up)


_UP_ROOT = ("up-root",)  # the key of a root's reducer


def _up_keys(segments, down_key) -> dict:
    """{id(segment): key of the up worker at seg.receiver that sends seg's partial sums}: it
    mirrors the down channel seg arrived on. (The root's reducer, where a segment's parent chain
    starts, is _UP_ROOT.) Equal keys are one tuple: there are a million segments at 1,024 ranks."""
    mirrored: dict = {}
    keys = {}
    for seg in segments:
        down = down_key[id(seg)]
        up = mirrored.get(down)
        if up is None:
            up = mirrored[down] = ("up",) + down[1:]
        keys[id(seg)] = up
    return keys


def _down_keys(segments, levels: int = 1):
    """Worker keys of the down phase: a root sends its own chunks from one worker; every rank has
    one worker per `levels` consecutive depths it has in the trees, which receives what arrives
    there and forwards it. Returns ({segment: key of the worker at seg.sender that puts it},
    {segment: key of the worker at seg.receiver that receives it})."""
    send, recv = {}, {}
    for seg in segments:  # parents come before their children
        send[id(seg)] = ("root",) if seg.parent is None else recv[id(seg.parent)]
        recv[id(seg)] = ("down", (seg.depth - 1) // levels)
    return send, recv


def _channels_per_peer(collective, segments, send_key, recv_key, mode) -> int:
    """The most channels any rank would have to one peer (data and entry channels, both
    directions), without building the plan."""
    return max(_channels_per_pair(collective, segments, send_key, recv_key, mode).values(),
               default=0)


def _channels_per_pair(collective, segments, send_key, recv_key, mode) -> dict:
    """{(a, b) with a < b: the channels ranks a and b share (data and entry channels, both
    directions, one lane per down worker pair)}, without building the plan."""
    compact = mode == "compact"
    pairs: dict = {}  # unordered rank pair -> set of channel keys

    def add(a, wa, b, wb, route, back):  # a != b: segments join two ranks; back: route b -> a
        if b < a:
            a, wa, b, wb, route = b, wb, a, wa, back
        keys = pairs.get((a, b))
        if keys is None:
            keys = pairs[(a, b)] = set()
        keys.add((wa, wb, route))

    down, up = collective != plan_ops.REDUCE_SCATTER, collective != plan_ops.ALL_GATHER
    up_key = _up_keys(segments, recv_key) if up and not compact else {}
    for seg in segments:
        x, c = seg.sender, seg.receiver
        if down:
            sent = 0 if compact else send_key[id(seg)]
            add(x, sent, c, 0 if compact else recv_key[id(seg)], seg.route, seg.back)
            add(x, ("entry", sent), c, "doorman", None, None)
        if up:
            up_here = 0 if compact else up_key[id(seg)]
            up_there = 0 if compact else (_UP_ROOT if seg.parent is None
                                          else up_key[id(seg.parent)])
            add(c, up_here, x, up_there, seg.back, seg.route)
            add(c, ("entry", up_here), x, "doorman", None, None)
    return {pair: len(keys) for pair, keys in pairs.items()}


def single_link(route) -> bool:
    """Whether a route (its nodes, in order) is one link, not a path through a switch: only the
    worker pairs of such routes take lanes (_lanes says why)."""
    return route is not None and len(route) == 2


def _lanes(segments, send_key, recv_key, used: dict, limit: int, cost: int) -> dict:
    """Lanes: {(sender, its worker key, receiver, its worker key, route) of the down phase:
    (lanes, chunks per slice)} for the worker pairs whose puts are spread over more than one
    channel; the up phase spreads the mirrored pair's puts alike (a lane costs `cost` channels:
    2 for all_reduce, whose up and down workers differ).

    Why: a link shares its bandwidth equally among the transfers on it, and a channel has one
    transfer at a time, so where worker pairs of unequal load (chunks per slice) meet on a link,
    the heavy one gets less than its share: its data falls behind, the links after it (critical
    too, in an exact forest) starve, and what they lose is never made up (mi250x4: the tail of
    the run, perf/sim_link_profile.py). Transfers of one chunk each would share the link by
    bytes; so the spare channels of each rank pair (limit - used) go, one at a time, to its
    worker pair with the most chunks per lane, until every lane carries one chunk per slice or
    the channels run out. Only pairs joined directly (a two-node route): the links of a switch
    are shared by other rank pairs, whose channels would lose their share to the lanes."""
    loads: dict = {}  # worker pair -> chunks per slice, in segment order
    for seg in segments:
        if not single_link(seg.route):
            continue  # through a switch, whose links other rank pairs share: see above
        key = (seg.sender, send_key[id(seg)], seg.receiver, recv_key[id(seg)], seg.route)
        loads[key] = loads.get(key, 0) + seg.hi - seg.lo
    by_pair: dict = {}  # unordered rank pair -> its worker pairs
    for key in loads:
        by_pair.setdefault((min(key[0], key[2]), max(key[0], key[2])), []).append(key)
    lanes = {}
    for pair, keys in by_pair.items():
        spare = limit - used.get(pair, 0)
        count = dict.fromkeys(keys, 1)
        while spare >= cost:
            best = None
            for key in keys:
                n = count[key]
                if loads[key] <= n:
                    continue  # a chunk per lane already
                if best is None or loads[key] * count[best] > loads[best] * n:
                    best = key
            if best is None:
                break
            count[best] += 1
            spare -= cost
        lanes.update((key, (n, loads[key])) for key, n in count.items() if n > 1)
    return lanes


def _down_phase(prog, collective, segments, root_of, k, in_place, send_key, recv_key,
                lanes=_NONE):
    """Data flows parent -> child from output to output; the root sends from its input
    (all_gather) or its reduced output (all_reduce). A worker pair with lanes (_lanes)
    puts its chunks of a slice, in order, over its lanes in equal parts (lane j: the chunks at
    positions [j*C/m, (j+1)*C/m) of its C per slice), a put per segment and lane."""
    roots: dict = {}
    for seg in segments:
        if seg.parent is None:
            roots.setdefault(seg.sender, []).append(prog.worker(seg.sender, send_key[id(seg)]))
    for root, senders in roots.items():
        if collective == plan_ops.ALL_REDUCE:  # each sender starts after the root's reduction
            for w in dict.fromkeys(senders):
                prog.handover(root, prog.worker(root, ("up-root",)), w)
        if collective == plan_ops.ALL_GATHER and not in_place:
            prog.add(root, senders[0], "copy", src=(IN, 0), dst=(OUT, root * k), n=k)
    # Shallowest first, then by first tree: the order data arrives in, and deadlock-free (an item
    # waits only for an item one level up, which comes earlier everywhere).
    items = []  # (order, rank, incoming segment or None, outgoing segments)
    for seg in segments:
        items.append(((seg.depth, seg.trees[0]), seg.receiver, seg, seg.children))
        if seg.parent is None:
            items.append(((0, seg.trees[0]), seg.sender, None, [seg]))
    items.sort(key=itemgetter(0, 1))
    # A segment is put before it is waited for (its item is one level deeper), so the put
    # leaves the receiving side here: id(segment) -> (channel on the receiver, its worker).
    # The ops are made as dicts here (one per put of a forest: millions at 1,024 ranks).
    arrival: dict = {}
    queued = prog.items
    from_input = collective == plan_ops.ALL_GATHER
    placed: dict = {}  # worker pair with lanes -> its chunks put so far in the slice
    for _, x, incoming, outgoing in items:
        if incoming is not None:
            for ch, w in arrival.pop(id(incoming)):
                queued[(x, w)].append({"op": plan_ops.WAIT, "ch": ch})
        if len(outgoing) > 1:
            outgoing = sorted(outgoing, key=lambda s: (s.trees[0], s.receiver))
        for seg in outgoing:
            sent_key = send_key[id(seg)]
            w = prog.worker(x, sent_key)
            child = seg.receiver
            child_w = prog.worker(child, recv_key[id(seg)])
            pieces = _lane_pieces(lanes, placed, (x, sent_key, child, recv_key[id(seg)],
                                                  seg.route), seg.lo, seg.hi)
            landed = arrival[id(seg)] = []
            for lane, lo, hi in pieces:
                ch, child_ch = prog.channel(x, w, child, child_w, seg.route, lane)
                landed.append((child_ch, child_w))
                buffer, index = _result_ref(collective, root_of[id(seg)], lo, k)
                op = {"op": plan_ops.PUT_SIGNAL, "ch": ch,
                      "src": [IN, lo] if incoming is None and from_input else [buffer, index],
                      "dst": [buffer, index]}
                if hi - lo != 1:
                    op["n"] = hi - lo
                queued[(x, w)].append(op)
                if seg.route is not None:
                    prog.routes[(x, ch)] = seg.route
            prog.sends_to.add((x, w, child))  # what note_put records


def _lane_pieces(lanes, placed, key, lo, hi):
    """[(lane, lo, hi)]: chunks lo..hi-1 of a segment of worker pair `key`, cut where its lanes
    (_lanes: m lanes for C chunks per slice) change: position p of the pair's slice is in
    lane p*m // C. `placed` counts the pair's chunks before this segment (and is advanced)."""
    spread = lanes.get(key)
    if spread is None:
        return ((0, lo, hi),)
    m, total = spread
    at = placed.get(key, 0)
    placed[key] = at + hi - lo
    pieces = []
    a = lo
    while a < hi:
        pos = at + a - lo
        lane = pos * m // total
        z = min(hi, a + ((lane + 1) * total + m - 1) // m - pos)
        pieces.append((lane, a, z))
        a = z
    return pieces


def _reverse(route):
    return tuple(reversed(route)) if route is not None else None


def _reduce(prog, rank, w, dst, srcs, n, ch=None, remote=None):
    """dst = reduction of srcs (dst may be srcs[0]); with ch, then put dst to the peer's remote.
    More sources than one op holds are folded into dst first."""
    srcs = list(srcs)
    while len(srcs) > MAX_REDUCE_SOURCES:
        head, srcs = srcs[:MAX_REDUCE_SOURCES], srcs[MAX_REDUCE_SOURCES:]
        prog.add(rank, w, "reduce", dst=dst, srcs=head, n=n)
        srcs = [dst] + srcs
    if ch is None:
        prog.add(rank, w, "reduce", dst=dst, srcs=srcs, n=n)
    else:
        prog.add(rank, w, "reduce_put", ch=ch, dst=dst, srcs=srcs, remote=remote, n=n)


def _signal_after(prog, rank, w, ch):
    """Signal on ch, fused into the worker's last op when that is a plain put on ch."""
    last = prog.items[(rank, w)][-1]
    if last["op"] == plan_ops.PUT and last.get("ch") == ch:
        last["op"] = plan_ops.PUT_SIGNAL
    else:
        prog.add(rank, w, "signal", ch=ch)
