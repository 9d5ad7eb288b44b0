"""Creating communicators and using the one-sided primitives from Python."""
from __future__ import annotations

import sys
import weakref
from collections.abc import Sequence
from typing import Any

from forestcc import _C
from forestcc.collectives import CollectivesMixin

__all__ = ["init", "unique_id", "UniqueId", "Communicator", "MemoryChannel", "RegisteredMemory"]

UniqueId = _C.UniqueId
MemoryChannel = _C.Channel
RegisteredMemory = _C.RegisteredMemory

_default: Communicator | None = None


def unique_id() -> UniqueId:
    """A new job id to create on one process (rank 0) and hand to the others, e.g. with
    ``bytes(uid)`` broadcast through mpi4py; pass it to :func:`init`."""
    return _C.UniqueId.create()


def init(unique_id: UniqueId | bytes | None = None, rank: int | None = None,
         size: int | None = None, timeout: float | None = None) -> Communicator:
    """Join a job and return its communicator.

    Without arguments, rank and size come from the launcher: forestcc-run, Open MPI (mpirun),
    MPICH (hydra), torchrun or Slurm (srun). When mpi4py is already imported and the launcher
    gives no address for rank 0, the unique id is broadcast through ``MPI.COMM_WORLD``.
    The environment-made communicator is created once per process; later calls return it.
    With ``unique_id`` (from :func:`unique_id` on one process), ``rank`` and ``size`` are required.
    ``timeout`` (seconds) bounds the rendezvous and every later wait (default FORESTCC_TIMEOUT).
    """
    global _default
    t = float(timeout) if timeout is not None else 0.0
    if timeout is not None and not t > 0:
        raise ValueError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    if unique_id is not None:
        if rank is None or size is None:
            raise ValueError("init(unique_id=...) also needs rank= and size=")
        _check_rank(rank, size)
        uid = unique_id if isinstance(unique_id, _C.UniqueId) else _C.UniqueId.from_bytes(bytes(unique_id))
        return Communicator(_C.Communicator.from_unique_id(uid, rank, size, t))
    if rank is not None or size is not None:
        raise ValueError("rank= and size= are only used together with unique_id=")
    if _default is None:
        _default = Communicator(_from_environment(t))
    return _default


def _check_rank(rank: int, size: int) -> None:
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"size: must be a positive integer, got {size!r}")
    if not isinstance(rank, int) or not 0 <= rank < size:
        raise ValueError(f"rank: must be in [0, {size}), got {rank!r}")


def _from_environment(timeout: float) -> _C.Communicator:
    info = _C.detect_launch()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and info.size > 1 and not info.root_address \
            and info.source in ("openmpi", "mpich", "slurm"):
        world = mpi.COMM_WORLD
        raw = bytes(_C.UniqueId.create()) if world.Get_rank() == 0 else None
        raw = world.bcast(raw, root=0)
        uid = _C.UniqueId.from_bytes(raw)
        return _C.Communicator.from_unique_id(uid, world.Get_rank(), world.Get_size(), timeout)
    return _C.Communicator.from_environment(timeout)


# Bootstrap tag of the unique-id messages of split(); below 2**63 like every user tag.
_SPLIT_TAG = 2**62


class Communicator(CollectivesMixin):
    """The ranks of a job. ``rank``/``size``; ``local_rank``/``local_size`` among the ranks of
    this node; ``node_of(r)`` numbers the nodes (ranks sharing a hostname, or FORESTCC_NODE_ID).
    Collectives (all_reduce, all_gather, ...) come from :class:`forestcc.collectives.CollectivesMixin`."""

    def __init__(self, native: _C.Communicator):
        self._native = native
        self._plan_files = {}
        # The engine calls back for plan files; a weak reference avoids a cycle through native
        # code, which the garbage collector cannot see.
        this = weakref.ref(self)
        # The engine loads the tuning table itself (FORESTCC_TUNING, the user's, or the built-in).
        self._engine = _C.Engine(native, lambda algo: this()._resolve_plan(algo))
        self._splits = 0

    rank = property(lambda self: self._native.rank, doc="This process's rank.")
    size = property(lambda self: self._native.size, doc="Number of ranks.")
    local_rank = property(lambda self: self._native.local_rank, doc="Index among this node's ranks.")
    local_size = property(lambda self: self._native.local_size, doc="Ranks on this node.")
    local_ranks = property(lambda self: list(self._native.local_ranks), doc="Ranks on this node.")
    node_count = property(lambda self: self._native.node_count, doc="Number of nodes.")
    timeout = property(lambda self: self._native.timeout, doc="Deadline of every wait, seconds.")

    def node_of(self, rank: int) -> int:
        """The node number of ``rank`` (nodes numbered by first appearance in rank order)."""
        return self._native.node_of(rank)

    def peer_left(self, rank: int) -> bool:
        """Whether ``rank`` has left the job, so that a later wait on it raises at once: on another
        host, it said goodbye (destroyed its communicator, or its process exited) and closed its
        connection; on this host, it destroyed its communicator (a rank here whose process ended
        is dead to its waits, not left)."""
        return self._native.peer_left(rank)

    def last_plan(self, collective: str) -> str | None:
        """The name of the built-in plan this rank's last ``collective`` call by algorithm name
        or ``"auto"`` ran (e.g. ``"eager_all_reduce_2_in_place"``: what auto chose), or None
        before the first. Calls with a plan file leave it unchanged."""
        return self._engine.last_plan(collective)

    def register(self, array: Any) -> RegisteredMemory:
        """Register an array (writable, C-contiguous) so peers can put into / get from it.
        Arrays from :func:`forestcc.empty` are mapped by peers; others are reached by single-copy
        cross-process access."""
        return self._native.register_array(array)

    def connect(self, peer: int | Sequence[int], memory: Any,
                tag: int = 0) -> MemoryChannel | list[MemoryChannel]:
        """Open a channel to ``peer`` (or one per rank of a list of peers; a list lets ranks
        connect to each other in any order without deadlock). Pairwise collective: the peer calls
        ``connect(this_rank, its_memory, tag)`` too. ``memory`` is a RegisteredMemory or an array
        (registered on the fly). A channel puts from this memory into the peer's and gets from
        the peer's into this one."""
        peers = [peer] if isinstance(peer, int) else list(peer)
        for p in peers:
            if not isinstance(p, int) or not 0 <= p < self.size:
                raise ValueError(f"peer: must be a rank in [0, {self.size}), got {p!r}")
        if len(set(peers)) != len(peers):
            raise ValueError(f"peer: lists a rank twice: {peers}")
        if not isinstance(tag, int) or not 0 <= tag < 2**56:
            raise ValueError(f"tag: must be an integer in [0, 2**56), got {tag!r}")
        mem = memory if isinstance(memory, _C.RegisteredMemory) else self.register(memory)
        channels = self._native.connect(peers, mem, tag)
        for channel in channels:
            channel._memory = mem  # the channel keeps the registered array alive
        return channels[0] if isinstance(peer, int) else channels

    def split(self, color: int | None, key: int | None = None) -> Communicator | None:
        """Collective: a new communicator of the ranks that passed the same ``color``, ranked
        by ``key`` (default: this rank), ties by rank. ``color=None`` takes no part and gets
        None. Like MPI_Comm_split."""
        refusal = None
        if color is not None and (not isinstance(color, int) or color < 0):
            refusal = ValueError(f"color: must be a non-negative integer or None, got {color!r}")
        key = self.rank if key is None else key
        if refusal is None and not isinstance(key, int):
            refusal = ValueError(f"key: must be an integer, got {key!r}")
        self._splits += 1
        tag = _SPLIT_TAG + self._splits
        # A rank that refuses its arguments still takes part in the exchange, as a refusal: every
        # rank then raises at once (rather than the others waiting out their timeout for it), and
        # the ranks' counts of splits stay equal, so the communicator goes on working.
        mine = b"refused" if refusal else f"{-1 if color is None else color} {key}".encode()
        gathered = self.all_gather_bytes(mine)
        if refusal:
            raise refusal
        refused = [r for r, e in enumerate(gathered) if e == b"refused"]
        if refused:
            raise ValueError(f"split: rank{'s' if len(refused) > 1 else ''} {', '.join(map(str, refused))} "
                             f"refused {'their' if len(refused) > 1 else 'its'} arguments (its error says why); "
                             f"no rank made the new communicator")
        entries = [tuple(map(int, e.split())) for e in gathered]
        if color is None:
            return None
        members = sorted((k, r) for r, (c, k) in enumerate(entries) if c == color)
        ranks = [r for _, r in members]
        leader = ranks[0]
        if self.rank == leader:
            uid = bytes(_C.UniqueId.create())
            for r in ranks[1:]:
                self.send_bytes(r, uid, tag)
        else:
            uid = self.recv_bytes(leader, tag)
        return init(unique_id=uid, rank=ranks.index(self.rank), size=len(ranks),
                    timeout=self.timeout)

    def all_gather_bytes(self, data: bytes) -> list[bytes]:
        """Every rank's ``data``, by rank (small control messages, through the bootstrap)."""
        return list(self._native.bootstrap_all_gather(bytes(data)))

    def send_bytes(self, peer: int, data: bytes, tag: int = 0) -> None:
        """Send a small message to ``peer``; matched by (sender, tag) on the receiver."""
        self._native.bootstrap_send(peer, bytes(data), tag)

    def recv_bytes(self, peer: int, tag: int = 0) -> bytes:
        """Receive the next message from ``peer`` with ``tag``."""
        return self._native.bootstrap_recv(peer, tag)

    def abort(self, reason: str) -> None:
        """Poison the communicator here and on every same-node rank: their waits raise
        AbortedError with ``reason``."""
        self._native.abort(reason)

    def __repr__(self) -> str:
        return f"<forestcc.Communicator rank {self.rank} of {self.size}, {self.node_count} node(s)>"
