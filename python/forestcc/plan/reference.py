"""Small reference plans built with PlanBuilder, one per collective.

They exist to exercise the format, the verifier and the executor with known-good programs;
the production parametric generators live in C++. Every generator takes nranks >= 1 and
in_place, uses one worker per rank and "auto" channels, and returns a validated plan dict.
"""
from __future__ import annotations

from typing import Callable

from . import ops
from .builder import PlanBuilder

IN, OUT, SCR = ops.INPUT, ops.OUTPUT, ops.SCRATCH


def _ring_channels(b: PlanBuilder, n: int):
    """Per rank: (channel to the right neighbour, channel to the left neighbour)."""
    right = [0] * n
    left = [0] * n
    for r in range(n):
        right[r], left[(r + 1) % n] = b.channel_pair(r, (r + 1) % n)
    return right, left


def _ring_entry(b: PlanBuilder, r: int, w: int, right, left) -> None:
    """Tell the left neighbour this rank has entered the call, then wait until the right one
    has: its buffers are free to be written only from then on."""
    b.signal(r, w, left[r])
    b.wait(r, w, right[r])


def _direct_channels(b: PlanBuilder, n: int) -> dict:
    """(rank, peer) -> channel id on rank, one pair for every two ranks."""
    chans = {}
    for r in range(n):
        for p in range(r + 1, n):
            chans[(r, p)], chans[(p, r)] = b.channel_pair(r, p)
    return chans


def _build(b: PlanBuilder, generator: str, **params) -> dict:
    return b.build(generator=f"forestcc.plan.reference.{generator}",
                   params=dict(params, in_place=b.in_place))


def _single_rank(b: PlanBuilder, generator: str, chunks: int = 1, **params) -> dict:
    """The one-rank plan of a ring: the output is the input (a copy unless in place)."""
    w = b.worker(0)
    if not b.in_place:
        b.copy(0, w, (IN, 0), (OUT, 0), n=chunks)
    return _build(b, generator, **params)


def ring_all_reduce(nranks: int, in_place: bool = False, parts: int = 1) -> dict:
    """Ring all_reduce: a reduce-scatter ring, then an all-gather ring.

    The vector is N rank-chunks of `parts` chunks each (chunks_per_block = N*parts). In step s
    of the reduce-scatter rank r adds its input to the partial sum of rank-chunk (r-s-1) mod N
    received from the left in scratch slot s-1, and puts the result to the right neighbour's
    slot s. After N-1 steps rank r holds rank-chunk r reduced; N-1 all-gather steps pass the
    reduced rank-chunks around the ring. Each rank sends 2(N-1)/N of the vector.
    """
    n, m = nranks, parts
    b = PlanBuilder(ops.ALL_REDUCE, n, chunks_per_block=n * m, in_place=in_place,
                    name=f"ring_all_reduce_{n}")

    def first_chunk(j):  # first chunk of rank-chunk j
        return (j % n) * m

    def slot(s, j):  # scratch slot s holding rank-chunk j: same parts as the input chunks
        return (SCR, s * n * m + first_chunk(j))

    if n == 1:
        return _single_rank(b, "ring_all_reduce", chunks=m, parts=parts)
    right, left = _ring_channels(b, n)
    for r in range(n):
        w = b.worker(r)
        _ring_entry(b, r, w, right, left)
        b.put_signal(r, w, right[r], (IN, first_chunk(r - 1)), slot(0, r - 1), n=m)
        for s in range(1, n - 1):
            b.wait(r, w, left[r])
            held = slot(s - 1, r - s - 1)
            b.reduce_put(r, w, right[r], held, [held, (IN, first_chunk(r - s - 1))],
                         slot(s, r - s - 1), n=m)
            b.signal(r, w, right[r])
        b.wait(r, w, left[r])
        own = first_chunk(r)
        b.reduce(r, w, (OUT, own), [(IN, own), slot(n - 2, r)], n=m)
        for t in range(n - 1):
            if t > 0:
                b.wait(r, w, left[r])
            chunk = (OUT, first_chunk(r - t))
            b.put_signal(r, w, right[r], chunk, chunk, n=m)
        b.wait(r, w, left[r])
    return _build(b, "ring_all_reduce", parts=parts)


def ring_reduce_scatter(nranks: int, in_place: bool = False) -> dict:
    """Ring reduce_scatter: in step s rank r adds its block (r-s-1) mod N to the partial sum
    from the left and passes it right; after N-1 steps rank r holds block r reduced."""
    n = nranks
    b = PlanBuilder(ops.REDUCE_SCATTER, n, in_place=in_place, name=f"ring_reduce_scatter_{n}")
    if n == 1:
        return _single_rank(b, "ring_reduce_scatter")
    right, left = _ring_channels(b, n)
    for r in range(n):
        w = b.worker(r)
        _ring_entry(b, r, w, right, left)
        b.put_signal(r, w, right[r], (IN, (r - 1) % n), (SCR, 0))
        for s in range(1, n - 1):
            b.wait(r, w, left[r])
            b.reduce_put(r, w, right[r], (SCR, s - 1), [(SCR, s - 1), (IN, (r - s - 1) % n)],
                         (SCR, s))
            b.signal(r, w, right[r])
        b.wait(r, w, left[r])
        b.reduce(r, w, (OUT, 0), [(IN, r), (SCR, n - 2)])
    return _build(b, "ring_reduce_scatter")


def ring_all_gather(nranks: int, in_place: bool = False) -> dict:
    """Ring all_gather: in step t rank r forwards block (r-t) mod N to the right neighbour's
    output; N-1 steps, each rank sends (N-1)/N of the output."""
    n = nranks
    b = PlanBuilder(ops.ALL_GATHER, n, in_place=in_place, name=f"ring_all_gather_{n}")
    if n == 1:
        return _single_rank(b, "ring_all_gather")
    right, left = _ring_channels(b, n)
    for r in range(n):
        w = b.worker(r)
        if not in_place:
            b.copy(r, w, (IN, 0), (OUT, r))
        _ring_entry(b, r, w, right, left)
        for t in range(n - 1):
            if t > 0:
                b.wait(r, w, left[r])
            b.put_signal(r, w, right[r], (OUT, (r - t) % n), (OUT, (r - t) % n))
        b.wait(r, w, left[r])
    return _build(b, "ring_all_gather")


def direct_all_gather_get(nranks: int, in_place: bool = False) -> dict:
    """all_gather by gets: after an entry handshake every rank reads each peer's input,
    flushes, then tells the peer it is done reading so the peer may return."""
    n = nranks
    b = PlanBuilder(ops.ALL_GATHER, n, in_place=in_place, name=f"direct_all_gather_get_{n}")
    chans = _direct_channels(b, n)
    for r in range(n):
        w = b.worker(r)
        if not in_place:
            b.copy(r, w, (IN, 0), (OUT, r))
        peers = [(r + d) % n for d in range(1, n)]
        for p in peers:
            b.signal(r, w, chans[(r, p)])
        for p in peers:
            b.wait(r, w, chans[(r, p)])
            b.get(r, w, chans[(r, p)], (IN, 0), (OUT, p))
        for p in peers:
            b.flush(r, w, chans[(r, p)])
            b.signal(r, w, chans[(r, p)])
        for p in peers:
            b.wait(r, w, chans[(r, p)])
    return _build(b, "direct_all_gather_get")


def direct_all_to_all(nranks: int, in_place: bool = False) -> dict:
    """Direct all_to_all: after an entry handshake rank r puts its block b straight into rank
    b's output block r. In place a peer's output is still its unsent input, so each rank first
    copies its input to scratch and only then says it has entered."""
    n = nranks
    b = PlanBuilder(ops.ALL_TO_ALL, n, in_place=in_place, name=f"direct_all_to_all_{n}")
    chans = _direct_channels(b, n)
    for r in range(n):
        w = b.worker(r)
        peers = [(r + d) % n for d in range(1, n)]
        source = SCR if in_place else IN
        if in_place:
            b.copy(r, w, (IN, 0), (SCR, 0), n=n)
        else:
            b.copy(r, w, (IN, r), (OUT, r))
        for p in peers:
            b.signal(r, w, chans[(r, p)])
        for p in peers:
            b.wait(r, w, chans[(r, p)])
            b.put_signal(r, w, chans[(r, p)], (source, p), (OUT, r))
        for p in peers:
            b.wait(r, w, chans[(r, p)])
    return _build(b, "direct_all_to_all")


def tree_broadcast(nranks: int, in_place: bool = False, root: int = 0,
                   chunks_per_block: int = 1) -> dict:
    """Binary-tree broadcast: relative rank v = (r - root) mod N receives from (v-1)//2 and
    forwards to 2v+1 and 2v+2, each child having said it entered; about log2(N) steps."""
    n, k = nranks, chunks_per_block
    b = PlanBuilder(ops.BROADCAST, n, chunks_per_block=k, in_place=in_place, root=root,
                    name=f"tree_broadcast_{n}")

    def rank_of(v):
        return (v + root) % n

    to_child, to_parent = {}, {}
    for v in range(1, n):
        to_child[v], to_parent[v] = b.channel_pair(rank_of((v - 1) // 2), rank_of(v))
    for v in range(n):
        r = rank_of(v)
        w = b.worker(r)
        children = [c for c in (2 * v + 1, 2 * v + 2) if c < n]
        if v == 0:
            source = IN
            if not in_place:
                b.copy(r, w, (IN, 0), (OUT, 0), n=k)
        else:
            source = OUT
            b.signal(r, w, to_parent[v])
            b.wait(r, w, to_parent[v])
        for child in children:
            b.wait(r, w, to_child[child])
            b.put_signal(r, w, to_child[child], (source, 0), (OUT, 0), n=k)
    return _build(b, "tree_broadcast", root=root)


def direct_reduce(nranks: int, in_place: bool = False, root: int = 0) -> dict:
    """Direct reduce: the root says it entered, every other rank puts its input into the
    root's scratch slot <rank>, and the root reduces them all into its output."""
    n = nranks
    b = PlanBuilder(ops.REDUCE, n, in_place=in_place, root=root, scratch=n,
                    name=f"direct_reduce_{n}")
    chans = _direct_channels(b, n)
    others = [q for q in range(n) if q != root]
    w_root = b.worker(root)
    for q in others:
        b.signal(root, w_root, chans[(root, q)])
    for q in others:
        w = b.worker(q)
        b.wait(q, w, chans[(q, root)])
        b.put_signal(q, w, chans[(q, root)], (IN, 0), (SCR, q))
    for q in others:
        b.wait(root, w_root, chans[(root, q)])
    b.reduce(root, w_root, (OUT, 0), [(IN, 0)] + [(SCR, q) for q in others])
    return _build(b, "direct_reduce", root=root)


def direct_gather(nranks: int, in_place: bool = False, root: int = 0) -> dict:
    """Direct gather: the root says it entered; every other rank puts its input into the
    root's output block <rank>."""
    n = nranks
    b = PlanBuilder(ops.GATHER, n, in_place=in_place, root=root, name=f"direct_gather_{n}")
    chans = _direct_channels(b, n)
    others = [q for q in range(n) if q != root]
    w_root = b.worker(root)
    if not in_place:
        b.copy(root, w_root, (IN, 0), (OUT, root))
    for q in others:
        b.signal(root, w_root, chans[(root, q)])
    for q in others:
        w = b.worker(q)
        b.wait(q, w, chans[(q, root)])
        b.put_signal(q, w, chans[(q, root)], (IN, 0), (OUT, q))
    for q in others:
        b.wait(root, w_root, chans[(root, q)])
    return _build(b, "direct_gather", root=root)


def direct_scatter(nranks: int, in_place: bool = False, root: int = 0) -> dict:
    """Direct scatter: every other rank says it entered; the root puts its input block q into
    rank q's output."""
    n = nranks
    b = PlanBuilder(ops.SCATTER, n, in_place=in_place, root=root, name=f"direct_scatter_{n}")
    chans = _direct_channels(b, n)
    others = [q for q in range(n) if q != root]
    w_root = b.worker(root)
    if not in_place:
        b.copy(root, w_root, (IN, root), (OUT, 0))
    for q in others:
        w = b.worker(q)
        b.signal(q, w, chans[(q, root)])
        b.wait(q, w, chans[(q, root)])
    for q in others:
        b.wait(root, w_root, chans[(root, q)])
        b.put_signal(root, w_root, chans[(root, q)], (IN, q), (OUT, 0))
    return _build(b, "direct_scatter", root=root)


def ring_sendrecv(nranks: int, in_place: bool = False) -> dict:
    """Ring shift: rank r sends its input to rank r+1. In place the data goes to the
    neighbour's scratch first and is copied to the output once this rank's own put has
    finished reading (flush)."""
    n = nranks
    b = PlanBuilder(ops.SENDRECV, n, in_place=in_place, name=f"ring_sendrecv_{n}")
    if n == 1:
        return _single_rank(b, "ring_sendrecv")
    right, left = _ring_channels(b, n)
    for r in range(n):
        w = b.worker(r)
        _ring_entry(b, r, w, right, left)
        b.put_signal(r, w, right[r], (IN, 0), (SCR if in_place else OUT, 0))
        b.wait(r, w, left[r])
        if in_place:
            b.flush(r, w, right[r])
            b.copy(r, w, (SCR, 0), (OUT, 0))
    return _build(b, "ring_sendrecv")


def dissemination_barrier(nranks: int, in_place: bool = False) -> dict:
    """Dissemination barrier: in round j rank r signals rank r+2^j and waits for rank r-2^j;
    after ceil(log2 N) rounds every rank has heard, transitively, from every other."""
    n = nranks
    b = PlanBuilder(ops.BARRIER, n, in_place=in_place, name=f"dissemination_barrier_{n}")
    rounds = []
    distance = 1
    while distance < n:
        send, recv = [0] * n, [0] * n
        for r in range(n):
            send[r], recv[(r + distance) % n] = b.channel_pair(r, (r + distance) % n)
        rounds.append((send, recv))
        distance *= 2
    for r in range(n):
        w = b.worker(r)
        for send, recv in rounds:
            b.signal(r, w, send[r])
            b.wait(r, w, recv[r])
    return _build(b, "dissemination_barrier")


def _rooted(generator: Callable[..., dict]) -> Callable[..., dict]:
    return lambda nranks, in_place=False, root=0: generator(nranks, in_place, root=root)


def _unrooted(generator: Callable[..., dict]) -> Callable[..., dict]:
    return lambda nranks, in_place=False, root=None: generator(nranks, in_place)


# collective -> generator(nranks, in_place=False, root=...) giving a correct plan
REFERENCE_GENERATORS: dict[str, Callable[..., dict]] = {
    ops.ALL_REDUCE: _unrooted(ring_all_reduce),
    ops.ALL_GATHER: _unrooted(ring_all_gather),
    ops.REDUCE_SCATTER: _unrooted(ring_reduce_scatter),
    ops.ALL_TO_ALL: _unrooted(direct_all_to_all),
    ops.BROADCAST: _rooted(tree_broadcast),
    ops.REDUCE: _rooted(direct_reduce),
    ops.GATHER: _rooted(direct_gather),
    ops.SCATTER: _rooted(direct_scatter),
    ops.SENDRECV: _unrooted(ring_sendrecv),
    ops.BARRIER: _unrooted(dissemination_barrier),
}


def reference_plan(collective: str, nranks: int, in_place: bool = False,
                   root: int = 0) -> dict:
    """A correct reference plan for any collective (root is ignored by unrooted ones)."""
    return REFERENCE_GENERATORS[collective](nranks, in_place, root=root)
