"""The verifier's vector clock components, and which of them each rank's clocks keep.

Components. One per worker, one per channel "lane" (a channel's puts and signals run
asynchronously, in order within the channel) and one "entered" component per rank, which every
worker of the rank holds at 1 from its start: a clock that holds rank p's entered component has
a signal chain from rank p, which is what the entry rule ("before_peer_entered") and the barrier
rule ("not_synchronized") ask.

Sparse clocks. A clock is a dict {component: events seen}; absent means 0. A 1,024-rank forest
plan has about a million components, and a dense clock per worker (what the verifier kept before)
is gigabytes; a worker's clock holds only the components it has heard of.

Projection on what each rank's clocks are read for. The clocks are read in one place only: an
access to a chunk of memory is checked against the previous accesses to the same chunk (a clock
of the new accessor must show each of them), and at the end every access to rank r's memory is
checked against r's finishing clock. So when ``project`` is on, a clock of rank q keeps only the
components that access a chunk which some component of q also accesses, or a chunk of q's own
memory, and the entered marks of the ranks whose memory q's components access; a wait drops the
rest of the signal's clock. These sets come from one scan of the plan's ops
(``_C.plan.co_access``). In a forest plan a chunk has two or three accessors (the lane that puts
it, the worker or lanes that read it), so a rank keeps a few hundred components at 256 ranks
where keeping every component of every rank it exchanges data with (what this projection
replaced) meant 6,182, and the clocks and their change logs shrank with it.

Dropping an entry can only make a clock smaller, so every ordering the projected clocks show is
real: the projection never hides a race, an unfinished access or an early access. It can lose an
ordering that reaches a rank through a third rank that relayed it without accessing the chunk
concerned, and then report an issue that is not there; the verifier re-checks any such report
with unprojected clocks (verifier.verify), so a result is never spurious where that fits.
Barrier and eager plans keep every entered component everywhere (their rule is global). Plans
with few components (up to verifier._PROJECT_ABOVE_COMPONENTS) are verified with full clocks
directly: theirs are small anyway.
"""
from __future__ import annotations

from forestcc import _C

from . import geometry, ops

__all__ = ["Components"]


class Components:
    """Numbering of the clock components of a valid plan, and which of them each rank keeps.

    worker_comp[r][w], lane_comp[r][ch] and entered[r] are component ids; ``keeps(rank, comp)``
    says whether clocks of ``rank`` keep ``comp`` (always true when not projecting)."""

    def __init__(self, plan: dict, project: bool = True):
        ranks = plan["ranks"]
        n = plan["nranks"]
        self.project = project
        self.worker_comp: list = []
        self.lane_comp: list = []
        comps = 0
        for entry in ranks:  # lists, not ranges: one int object per component, shared by
            # every clock and change log that holds it
            self.worker_comp.append(list(range(comps, comps + len(entry["workers"]))))
            comps += len(entry["workers"])
            self.lane_comp.append(list(range(comps, comps + len(entry["channels"]))))
            comps += len(entry["channels"])
        self.entered = list(range(comps, comps + n))
        self.count = comps + n
        # The components each rank's clocks keep (_C.plan.KeptComponents, sorted arrays in C++:
        # millions of entries at 1,024 ranks); None: all.
        self.kept = None
        if project:
            buffers = plan["buffers"]
            self.kept = _C.plan.co_access(
                ranks, [buffers[ops.INPUT], buffers[ops.OUTPUT], buffers[ops.SCRATCH]],
                plan["chunks_per_block"], geometry.alias_kind(plan["collective"], plan["in_place"]),
                # rule 7 asks whether every rank saw every other enter
                every_entered=(plan["collective"] == ops.BARRIER
                               or plan.get("scratch_banks", 1) == 2))

    def keeps(self, rank: int, comp: int) -> bool:
        """Whether clocks of ``rank`` keep component ``comp`` (see the module docstring)."""
        return self.kept is None or self.kept.keeps(rank, comp)

    def join_replayed(self, rank: int, clock: dict, log: list, end: int, changed: list) -> None:
        """clock = max(clock, other) over the components ``rank`` keeps, ``other`` being the clock
        whose change log (``changed`` as below: (component, value) pairs flattened, from the
        clock's start) is log[:end]; every component it raises is logged to ``changed`` as two
        items, the component and its new value, in the order ``other``'s components first appear.
        (The loop is C++, _C.plan.join_clock_replayed: the join was most of the time of verifying
        large plans, and replaying the log spares a copy of the clock per first signal.)"""
        _C.plan.join_clock_replayed(clock, log, end, self.kept, rank, changed)

    def join_log(self, rank: int, clock: dict, log: list, start: int, end: int,
                 changed: list) -> None:
        """As join, with the changes log[start:end] of another clock ((component, value) pairs
        flattened, as ``changed`` collects them) for ``other``: the caller joined that clock as
        it was at log position ``start`` before, so only these changes can be new."""
        _C.plan.join_clock_log(clock, log, start, end, self.kept, rank, changed)
