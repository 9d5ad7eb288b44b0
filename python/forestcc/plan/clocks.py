"""The verifier's vector clock components, and which of them each rank's clocks keep.

Components. One per worker, one per channel "lane" (a channel's puts and signals run
asynchronously, in order within the channel) and one "entered" component per rank, which every
worker of the rank holds at 1 from its start: a clock that holds rank p's entered component has
a signal chain from rank p, which is what the entry rule ("before_peer_entered") and the barrier
rule ("not_synchronized") ask.

Sparse clocks. A clock is a dict {component: events seen}; absent means 0. A 1,024-rank forest
plan has about a million components, and a dense clock per worker (what the verifier kept before)
is gigabytes; a worker's clock holds only the components it has heard of.

Projection on the neighbourhood. The clocks are read in one place only: an access to rank r's
memory is checked against the previous accesses to the same chunk, which were made by components
that *touch* rank r (its workers, the lanes that put into or get from it, the workers that
get_reduce from it). The clocks of rank q's workers are read for accesses to q's memory and,
through q's lanes, to the memory of q's data peers (the ranks it puts to, gets from or
get_reduces from). So when ``project`` is on, a clock of rank q keeps only the components that
touch q or one of its data peers (and the entered components of its data peers), and a wait
drops the rest of the signal's clock. This keeps a tree plan's clocks to a few hundred entries
however many ranks it has.

Dropping an entry can only make a clock smaller, so every ordering the projected clocks show is
real: the projection never hides a race, an unfinished access or an early access. It can lose an
ordering that reaches a rank through a third rank that relayed it without touching the memory
concerned, and then report an issue that is not there; the verifier re-checks any such report
with unprojected clocks (verifier.verify), so a result is never spurious where that fits.
Barrier and eager plans keep every entered component everywhere (their rule is global). Plans
with few components (up to verifier._PROJECT_ABOVE_COMPONENTS) are verified with full clocks
directly: theirs are small anyway.
"""
from __future__ import annotations

from forestcc import _C

from . import ops

__all__ = ["Components"]

# Ops whose lane carries data (and so touches the memory of both ends).
_DATA_LANE_OPS = frozenset((ops.PUT, ops.PUT_SIGNAL, ops.GET, ops.REDUCE_PUT))


class Components:
    """Numbering of the clock components of a valid plan, and the neighbourhood test.

    worker_comp[r][w], lane_comp[r][ch] and entered[r] are component ids; ``keeps(rank, comp)``
    says whether clocks of ``rank`` keep ``comp`` (always true when not projecting)."""

    def __init__(self, plan: dict, project: bool = True):
        ranks = plan["ranks"]
        n = plan["nranks"]
        self.project = project
        self.worker_comp: list = []
        self.lane_comp: list = []
        touches: list = []  # component -> ranks whose memory it reads or writes
        comps = 0
        for r, entry in enumerate(ranks):
            self.worker_comp.append(list(range(comps, comps + len(entry["workers"]))))
            comps += len(entry["workers"])
            touches += [{r} for _ in entry["workers"]]
            self.lane_comp.append(list(range(comps, comps + len(entry["channels"]))))
            comps += len(entry["channels"])
            touches += [set() for _ in entry["channels"]]
        self.entered = list(range(comps, comps + n))
        comps += n
        touches += [{r} for r in range(n)]
        self.count = comps
        data_peers = [set() for _ in range(n)]
        for r, entry in enumerate(ranks):
            peer = [c["peer"] for c in entry["channels"]]
            for w, worker in enumerate(entry["workers"]):
                for op in worker["ops"]:
                    name = op["op"]
                    if name in _DATA_LANE_OPS:
                        p = peer[op["ch"]]
                        touches[self.lane_comp[r][op["ch"]]].update((r, p))
                        data_peers[r].add(p)
                    elif name == ops.GET_REDUCE:
                        p = peer[op["ch"]]
                        touches[self.worker_comp[r][w]].add(p)
                        data_peers[r].add(p)
        global_rule = plan["collective"] == ops.BARRIER or plan.get("scratch_banks", 1) == 2
        # A tuple per component (most touch one or two ranks); None: kept by every rank.
        self.touches = [tuple(t) for t in touches]
        if global_rule:
            for comp in self.entered:
                self.touches[comp] = None
        self.near = [frozenset(data_peers[r] | {r}) for r in range(n)]

    def keeps(self, rank: int, comp: int) -> bool:
        """Whether clocks of ``rank`` keep component ``comp`` (see the module docstring)."""
        if not self.project:
            return True
        touched = self.touches[comp]
        if touched is None:
            return True
        near = self.near[rank]
        for r in touched:
            if r in near:
                return True
        return False

    def join(self, rank: int, clock: dict, other: dict, changed: list) -> None:
        """clock = max(clock, other) over the components ``rank`` keeps; every component it
        raises is logged to ``changed`` as two items, the component and its new value. (The
        loop is C++, _C.plan.join_clock: it was most of the time of verifying large plans.)"""
        _C.plan.join_clock(clock, other, self.touches, self._near_of(rank), changed)

    def join_log(self, rank: int, clock: dict, log: list, start: int, end: int,
                 changed: list) -> None:
        """As join, with the changes log[start:end] of another clock ((component, value) pairs
        flattened, as ``changed`` collects them) for ``other``: the caller joined that clock as
        it was at log position ``start`` before, so only these changes can be new."""
        _C.plan.join_clock_log(clock, log, start, end, self.touches, self._near_of(rank),
                               changed)

    def _near_of(self, rank: int):
        """The ranks whose components ``rank``'s clocks keep; None: all (not projecting)."""
        return self.near[rank] if self.project else None
