"""PlanBuilder: compose a plan rank by rank, worker by worker, op by op.

    b = PlanBuilder("all_gather", nranks=2)
    to1, to0 = b.channel_pair(0, 1)           # one channel on rank 0 and its partner on rank 1
    w0, w1 = b.worker(0), b.worker(1)
    b.put(0, w0, to1, ("input", 0), ("output", 0)); b.signal(0, w0, to1)
    ...
    plan = b.build(generator="my_generator")

Chunk refs are (buffer, index) pairs. The scratch size grows to fit the refs used unless it was
given. build() validates the result, so a generator bug shows up where the plan is made.
"""
from __future__ import annotations

from collections.abc import Sequence

from . import format as plan_format
from . import geometry, ops

Ref = tuple[str, int]
# The chunk ref fields each op can have (signals, waits and flushes none): _append looks only there.
_REF_FIELDS_PRESENT = {ops.SIGNAL: (), ops.WAIT: (), ops.FLUSH: ()}


class PlanBuilder:
    """Accumulates channels, workers and ops for one plan."""

    def __init__(self, collective: str, nranks: int, chunks_per_block: int = 1,
                 in_place: bool = False, scratch: int | None = None,
                 root: int | None = None, name: str | None = None):
        if collective not in ops.COLLECTIVES:
            raise ValueError(f"unknown collective {collective!r}")
        if (root is not None) != (collective in ops.ROOTED_COLLECTIVES):
            raise ValueError(f"{collective} {'needs' if root is None else 'takes no'} root")
        self.collective = collective
        self.nranks = nranks
        self.chunks_per_block = chunks_per_block
        self.in_place = in_place
        self.root = root
        self.name = name or collective
        self._fixed_scratch = scratch
        self._scratch_used = 0
        self._channels = [[] for _ in range(nranks)]  # rank -> [peer, transport]
        self._workers = [[] for _ in range(nranks)]   # rank -> [[op, ...], ...]

    # -- structure ------------------------------------------------------------------------

    def channel(self, rank: int, peer: int, transport: str = "auto") -> int:
        """Adds a channel on `rank` to `peer`; returns its id. The i-th channel rank->peer pairs
        with the i-th channel peer->rank, so add the partner with the same call order (or use
        channel_pair)."""
        if transport not in ops.TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r}")
        self._channels[rank].append((peer, transport))
        return len(self._channels[rank]) - 1

    def channel_pair(self, a: int, b: int, transport: str = "auto") -> tuple[int, int]:
        """Adds a matched pair of channels: (id on rank a towards b, id on rank b towards a).
        With a == b it adds two loopback channels on that rank, which pair with each other."""
        return self.channel(a, b, transport), self.channel(b, a, transport)

    def worker(self, rank: int) -> int:
        """Adds a worker (CPU thread / GPU thread block) on `rank`; returns its id."""
        self._workers[rank].append([])
        return len(self._workers[rank]) - 1

    def ops_of(self, rank: int, worker: int) -> list:
        """The op list of a worker so far (the builder's own list: appending to it adds ops, as
        they are: give the scratch they reach with reach_scratch, and leave out n when it is
        1)."""
        return self._workers[rank][worker]

    def take_ranks(self, channels: list, workers: list) -> None:
        """Every rank's channels ([(peer, transport)] per rank) and workers ([[op dict]] per rank)
        made elsewhere, in this builder's own form (the C++ tree compiler's answer); what was
        added before is replaced. Give the scratch the ops reach with reach_scratch."""
        if len(channels) != self.nranks or len(workers) != self.nranks:
            raise ValueError(f"take_ranks: {len(channels)} channel lists and {len(workers)} worker "
                             f"lists for {self.nranks} ranks")
        self._channels = channels
        self._workers = workers

    def reach_scratch(self, chunks: int) -> None:
        """The plan's scratch holds at least `chunks` chunks (for ops added through ops_of, whose
        refs the builder does not scan)."""
        self._scratch_used = max(self._scratch_used, chunks)

    # -- ops ------------------------------------------------------------------------------

    def _append(self, rank: int, worker: int, op: dict) -> None:
        # Called once per op of every generated plan (millions for a 1,024-rank forest): the
        # scratch size is tracked with plain lookups, and only for ops that name scratch.
        n = op.get("n", ops.DEFAULT_N)
        if n == ops.DEFAULT_N and "n" in op:
            del op["n"]
        for field in _REF_FIELDS_PRESENT.get(op["op"], ops.REF_FIELDS):
            ref = op.get(field)
            # Local or on a peer alike: scratch has the same size on every rank.
            if ref is not None and ref[0] == ops.SCRATCH and ref[1] + n > self._scratch_used:
                self._scratch_used = ref[1] + n
        for ref in op.get(ops.REF_LIST_FIELD, ()):
            if ref[0] == ops.SCRATCH and ref[1] + n > self._scratch_used:
                self._scratch_used = ref[1] + n
        self._workers[rank][worker].append(op)

    def append_op(self, rank: int, worker: int, op: dict) -> None:
        """Adds a ready op dict (the fields the methods below write, chunk refs as lists);
        the plan takes it as it is. For generators that build ops in bulk."""
        self._append(rank, worker, op)

    def put(self, rank: int, worker: int, ch: int, src: Ref, dst: Ref, n: int = 1) -> None:
        """Copy local src chunks to the channel peer's dst chunks."""
        self._append(rank, worker, {"op": ops.PUT, "ch": ch, "src": list(src), "dst": list(dst),
                                    "n": n})

    def get(self, rank: int, worker: int, ch: int, src: Ref, dst: Ref, n: int = 1) -> None:
        """Copy the channel peer's src chunks into local dst chunks."""
        self._append(rank, worker, {"op": ops.GET, "ch": ch, "src": list(src), "dst": list(dst),
                                    "n": n})

    def signal(self, rank: int, worker: int, ch: int) -> None:
        """Add 1 to the peer's semaphore on this channel pair."""
        self._append(rank, worker, {"op": ops.SIGNAL, "ch": ch})

    def wait(self, rank: int, worker: int, ch: int) -> None:
        """Wait for the next signal from the peer on this channel pair."""
        self._append(rank, worker, {"op": ops.WAIT, "ch": ch})

    def flush(self, rank: int, worker: int, ch: int) -> None:
        """Wait until this worker's puts and gets on the channel are done."""
        self._append(rank, worker, {"op": ops.FLUSH, "ch": ch})

    def copy(self, rank: int, worker: int, src: Ref, dst: Ref, n: int = 1) -> None:
        """Local copy of n chunks."""
        self._append(rank, worker, {"op": ops.COPY, "src": list(src), "dst": list(dst), "n": n})

    def reduce(self, rank: int, worker: int, dst: Ref, srcs: Sequence[Ref], n: int = 1) -> None:
        """Local dst = op(srcs) elementwise; dst may be one of srcs."""
        self._append(rank, worker, {"op": ops.REDUCE_OP, "dst": list(dst),
                                    "srcs": [list(s) for s in srcs], "n": n})

    def reduce_put(self, rank: int, worker: int, ch: int, dst: Ref, srcs: Sequence[Ref],
                   remote: Ref, n: int = 1) -> None:
        """Reduce srcs into local dst, then put dst to the peer's remote chunks."""
        self._append(rank, worker, {"op": ops.REDUCE_PUT, "ch": ch, "dst": list(dst),
                                    "srcs": [list(s) for s in srcs], "remote": list(remote),
                                    "n": n})

    def get_reduce(self, rank: int, worker: int, ch: int, dst: Ref, srcs: Sequence[Ref],
                   remote: Ref, n: int = 1) -> None:
        """Local dst = op(srcs..., the channel peer's remote chunks), reading the peer's memory
        as part of the op (synchronous: no flush needed before dst is used)."""
        self._append(rank, worker, {"op": ops.GET_REDUCE, "ch": ch, "src": list(remote),
                                    "dst": list(dst), "srcs": [list(s) for s in srcs], "n": n})

    def put_signal(self, rank: int, worker: int, ch: int, src: Ref, dst: Ref, n: int = 1) -> None:
        """put, then signal on the same channel."""
        self._append(rank, worker, {"op": ops.PUT_SIGNAL, "ch": ch, "src": list(src),
                                    "dst": list(dst), "n": n})

    # -- result ---------------------------------------------------------------------------

    def build(self, generator: str = "forestcc.plan.builder", params: dict | None = None,
              min_bytes: int = 0, max_bytes: int | None = None, max_slices: int = 1,
              min_slice_bytes: int = 0, topology_fingerprint: str | None = None,
              predicted_time_us: float | None = None, validate: bool = True,
              scratch_banks: int = 1, share_ops: bool = False) -> dict:
        """The plan as a dict in format v1 (validated unless validate=False); scratch_banks=2
        makes an eager plan (schedules/README.md, "Scratch banks"). share_ops: the plan takes
        the builder's op dicts instead of copies (for plans of millions of ops; the builder must
        not be used afterwards)."""
        sizes = geometry.expected_buffer_chunks(self.collective, self.nranks, self.chunks_per_block)
        scratch = self._fixed_scratch if self._fixed_scratch is not None else self._scratch_used
        plan = {
            "version": ops.FORMAT_VERSION,
            "name": self.name,
            "collective": self.collective,
            "nranks": self.nranks,
        }
        if self.root is not None:
            plan["root"] = self.root
        plan.update({
            "in_place": self.in_place,
            "chunks_per_block": self.chunks_per_block,
            "buffers": {ops.INPUT: sizes[ops.INPUT], ops.OUTPUT: sizes[ops.OUTPUT],
                        ops.SCRATCH: scratch},
            "size_range": {"min_bytes": min_bytes, "max_bytes": max_bytes},
            "pipeline": {"max_slices": max_slices, "min_slice_bytes": min_slice_bytes},
            **({"scratch_banks": scratch_banks} if scratch_banks != 1 else {}),
            "provenance": {"generator": generator, "params": dict(params or {}),
                           "topology_fingerprint": topology_fingerprint,
                           "predicted_time_us": predicted_time_us},
            "ranks": [
                {"rank": r,
                 "channels": [{"id": c, "peer": peer, "transport": transport}
                              for c, (peer, transport) in enumerate(self._channels[r])],
                 "workers": [{"id": w,
                              "ops": op_list if share_ops else [dict(op) for op in op_list]}
                             for w, op_list in enumerate(self._workers[r])]}
                for r in range(self.nranks)
            ],
        })
        if validate:
            plan_format.validate(plan, f"<{self.name}>")
        return plan
