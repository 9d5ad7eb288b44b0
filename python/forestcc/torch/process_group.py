"""``ProcessGroupForestcc``: a torch.distributed ProcessGroup whose calls run on forestcc.

torch accepts a Python ``ProcessGroup`` subclass from a registered backend's creator and calls
its methods for every ``torch.distributed`` function and from C++ (DDP's reducer). Each method
checks its arguments, turns the tensors into forestcc buffers (zero copy where they are
contiguous), queues the forestcc call and returns a :class:`~forestcc.torch.work.ForestccWork`.
A call made with ``async_op=False`` runs on the caller's thread instead of being queued.

CUDA tensors: the call is enqueued on torch's current stream, with NCCL's stream semantics
(:mod:`forestcc.torch.cuda_work`); ``async_op`` makes no difference there. A group's CUDA calls
run on one GPU: the device of its first CUDA tensor (several ranks may share one GPU).

Method names follow torch 2.13, which dispatches ``all_gather_into_tensor`` to
``all_gather_single``, ``reduce_scatter_tensor`` to ``reduce_scatter_single`` and
``all_to_all_single`` to ``all_to_all_single``; the older names (``_allgather_base``,
``_reduce_scatter_base``, ``alltoall_base``) are aliases.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from forestcc.torch import collectives, rendezvous
from forestcc.torch.cuda_work import CudaLauncher, enqueue_on_stream
from forestcc.torch.errors import ArgumentError, translate, unsupported
from forestcc.torch.tensors import byte_buffer, copy_bytes_into, host, one_tensor
from forestcc.torch.work import Completer, ForestccWork, GroupWork, completed_work

__all__ = ["BACKEND_NAME", "ProcessGroupForestcc"]

BACKEND_NAME = "forestcc"
_COLLECTIVE, _SEND, _RECV = "collective", "send", "recv"
_CPU = torch.device("cpu")

# Per thread: how deep in the methods that call forestcc it is, and whether the outermost one's
# call reached forestcc (_run). A call this layer refuses (its own argument checks) before that
# still takes its place in forestcc, so peers that entered it raise rather than meet this rank's
# next call (schedules/README.md, "Refused calls"): a collective through Engine.refuse_call, a
# send or recv through Engine.refuse_send_recv.
_calls = threading.local()


def _refuse_collective(pg: "ProcessGroupForestcc", *args: Any, **kwargs: Any) -> None:
    pg._comm._engine.refuse_call()


def _refuse_send(pg: "ProcessGroupForestcc", tensors: Any, dstRank: Any, *args: Any, **kwargs: Any) -> None:
    pg._comm._engine.refuse_send_recv([dstRank], [])


def _refuse_recv(pg: "ProcessGroupForestcc", tensors: Any, srcRank: Any, *args: Any, **kwargs: Any) -> None:
    pg._comm._engine.refuse_send_recv([], [srcRank])


def _refusing(method: Callable, refuse: Callable = _refuse_collective) -> Callable:
    @functools.wraps(method)
    def call(self, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_calls, "depth", 0)
        if depth == 0:
            _calls.handed_on = False
        _calls.depth = depth + 1
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            if depth == 0 and not _calls.handed_on and not self._shut_down:
                try:
                    refuse(self, *args, **kwargs)
                except Exception:
                    pass  # arguments too broken to name a peer: nothing takes the call's place
            raise
        finally:
            _calls.depth = depth
    return call


class ProcessGroupForestcc(collectives.CollectivesMixin, dist.ProcessGroup):
    """The ranks of a torch process group, with a forestcc communicator of their own.

    Made by ``init_process_group("forestcc")`` / ``new_group(backend="forestcc")`` (after
    ``import forestcc.torch``); ``store``, ``rank``, ``size`` and ``timeout`` are what torch passes
    a backend's creator. ``timeout`` bounds the rendezvous and every wait of every call."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        self._store = store
        self._timeout = timeout
        self._comm = rendezvous.communicator_from_store(store, rank, size, timeout)
        self._completer = Completer(f"pg{id(self):x}")
        self._launcher: CudaLauncher | None = None  # CUDA send/recv, made on first use
        self._gpu: torch.device | None = None  # the GPU of this group's CUDA calls
        self._group_name = ""
        self._group_desc = ""
        self._coalesced: list[dist.Work] | None = None  # between _start/_end_coalescing
        self._monitored_barriers = 0
        self._lock = threading.Lock()
        self._shut_down = False

    # -- what torch asks about the group ----------------------------------------------------

    def getBackendName(self) -> str:
        """The backend's name: "forestcc"."""
        return BACKEND_NAME

    def name(self) -> str:
        """The backend's name: "forestcc"."""
        return BACKEND_NAME

    @property
    def group_name(self) -> str:
        """The name torch registered this group under (functional collectives resolve it)."""
        return self._group_name

    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_desc(self) -> str:
        """torch's description of the group ("default_pg", "undefined"...)."""
        return self._group_desc

    def _set_group_desc(self, desc: str) -> None:
        self._group_desc = desc

    @property
    def communicator(self):
        """The forestcc :class:`~forestcc.Communicator` of this group's ranks."""
        return self._comm

    @property
    def timeout(self) -> timedelta:
        """The deadline of every wait (``init_process_group(timeout=...)``)."""
        return self._timeout

    def __repr__(self) -> str:
        return f"<ProcessGroupForestcc rank {self.rank()} of {self.size()} {self._group_name!r}>"

    # -- running calls -------------------------------------------------------------------------

    def _run(self, call: str, start: Callable[[bool], Any], finish: Callable[[], list],
             async_op: bool = True, stream: str = _COLLECTIVE,
             device: torch.device = _CPU) -> dist.Work:
        """Start a forestcc call (``start(async_op)`` returns its handle, or a list of them) and
        return its Work; ``finish()`` runs once it completed and returns the output tensors.
        On a CUDA ``device`` both are enqueued on torch's current stream instead."""
        if self._shut_down:
            raise dist.DistBackendError(f"forestcc {call}: the process group was shut down")
        if device != _CPU:  # (cheaper than device.type; only CPU and CUDA tensors get here)
            return self._run_cuda(call, start, finish, stream, device)
        _calls.handed_on = True  # errors from here are forestcc's (it refuses its own)
        try:
            handles = start(async_op)
        except BaseException as exc:
            torch_exc = translate(exc, call)
            if torch_exc is exc:
                raise
            raise torch_exc from exc
        if not async_op:
            return self._made(completed_work(finish(), call))
        if not isinstance(handles, (list, tuple)):
            handles = [handles]
        return self._made(self._completer.add(stream, handles, finish, call))

    def _made(self, work: dist.Work) -> dist.Work:
        """``work``, also counted in the coalesced block being made, if any."""
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    def _run_cuda(self, call: str, start: Callable[[bool], Any], finish: Callable[[], list],
                  stream: str, device: torch.device) -> dist.Work:
        if self._gpu is None:
            self._gpu = device
        elif device != self._gpu:
            raise ArgumentError(f"forestcc {call}: rank {self.rank()}'s group runs its CUDA calls "
                                f"on {self._gpu} (its first CUDA tensor's), got a tensor on "
                                f"{device}")
        _calls.handed_on = True  # errors from here are forestcc's (it refuses its own)
        if stream != _COLLECTIVE:
            with self._lock:
                if self._launcher is None:
                    self._launcher = CudaLauncher(f"pg{id(self):x}")
            # Synchronous there: forestcc queues an async send/recv and enqueues its GPU copy
            # later, which the event recorded after the call would not cover.
            return self._made(self._launcher.add(stream, call, device,
                                                 lambda: _no_handle(start(False)), finish))
        try:
            work = enqueue_on_stream(call, device, lambda: start(True), finish)
        except BaseException as exc:
            torch_exc = translate(exc, call)
            if torch_exc is exc:
                raise
            raise torch_exc from exc
        return self._made(work)

    # -- point to point, barriers ----------------------------------------------------------

    def send(self, tensors: Sequence[torch.Tensor], dstRank: int, tag: int = 0) -> ForestccWork:
        """Send the tensor to group rank ``dstRank``; completes when the receiver has it.
        Messages between two ranks match in the order they are posted (``tag`` must be 0)."""
        t = one_tensor(tensors, "send")
        _check_tag(tag, "send")
        buf, _ = byte_buffer(t)
        return self._run("send", lambda a: self._comm.send(host(buf), dstRank, async_op=a),
                         lambda: [t], stream=_SEND, device=t.device)

    def recv(self, tensors: Sequence[torch.Tensor], srcRank: int, tag: int = 0) -> ForestccWork:
        """Receive into the tensor what group rank ``srcRank`` sends (same number of bytes)."""
        t = one_tensor(tensors, "recv")
        _check_tag(tag, "recv")
        buf, copied = byte_buffer(t)

        def finish():
            if copied:
                copy_bytes_into(t, buf)
            return [t]

        return self._run("recv", lambda a: self._comm.recv(host(buf), srcRank, async_op=a),
                         finish, stream=_RECV, device=t.device)

    def recv_anysource(self, tensors: Sequence[torch.Tensor], tag: int = 0) -> ForestccWork:
        """Not supported: forestcc matches every receive with a named sender."""
        raise unsupported("recv_anysource", "receiving from any source (recv without src)")

    def barrier(self, opts: Any = None) -> ForestccWork:
        """Complete once every rank of the group has entered the barrier, on the host. In a
        group that made CUDA calls, each rank first waits until the GPU finished them (raising
        their error), as NCCL's barrier does."""
        async_op = True if opts is None else opts.asyncOp

        def gpu_done():
            if self._gpu is not None:
                self._comm.synchronize()

        if not async_op:
            return self._run("barrier", lambda a: (gpu_done(), self._comm.barrier()), list, False)
        # forestcc's barrier(async_op=True) fails in its bindings (no arrays to keep); a
        # one-byte all_reduce is a barrier too: no rank's result is complete before every
        # rank's input arrived.
        token = torch.zeros(1, dtype=torch.uint8)

        def start(a):
            gpu_done()
            return self._comm.all_reduce(host(token), op="max", async_op=a)

        return self._run("barrier", start, list)

    def monitored_barrier(self, timeout: timedelta | None = None,
                          wait_all_ranks: bool = False) -> None:
        """A barrier that names the ranks that did not arrive within ``timeout`` (default: the
        group's): rank 0 raises ``RuntimeError`` listing them (the first, or all with
        ``wait_all_ranks``), like Gloo's. Uses the group's store, so it works even when a rank
        is stuck outside forestcc. (``torch.distributed.monitored_barrier`` itself refuses
        every backend but Gloo; call it on the group: ``group.monitored_barrier(...)``.)"""
        timeout = self._timeout if timeout is None else timeout
        with self._lock:
            self._monitored_barriers += 1
            key = f"forestcc/monitored_barrier/{self._monitored_barriers}"
        me, n = self.rank(), self.size()
        if me != 0:
            self._store.set(f"{key}/{me}", b"1")
            try:
                self._store.wait([f"{key}/done"], timeout)
            except RuntimeError as exc:  # torch's DistStoreError (a timeout) is one
                raise RuntimeError(f"forestcc monitored_barrier: rank {me} did not hear from "
                                   f"rank 0 within {timeout}: {exc}") from exc
            return
        missing = []
        for r in range(1, n):
            try:
                # once one rank is missing the time is up: only look for the others
                left = timeout if not missing else timedelta(milliseconds=1)
                self._store.wait([f"{key}/{r}"], left)
            except RuntimeError:  # torch's DistStoreError: not there in time
                missing.append(r)
                if not wait_all_ranks:
                    break
        if missing:
            which = ("s " + ", ".join(map(str, missing)) if len(missing) > 1
                     else " " + str(missing[0]))
            raise RuntimeError(f"forestcc monitored_barrier: rank{which} failed to pass "
                               f"monitored_barrier in {timeout}")
        self._store.set(f"{key}/done", b"1")

    # -- coalescing (torch's _coalescing_manager with a device) -------------------------------

    def _start_coalescing(self, device: Any = None) -> None:
        """Start collecting the Works of the calls made until :meth:`_end_coalescing` (they run
        as they come; coalesced collectives come as one *_coalesced call)."""
        self._coalesced = []

    def _end_coalescing(self, device: Any = None) -> dist.Work:
        """The Work of the calls made since :meth:`_start_coalescing` (sends and receives
        among them complete in their own order, so every one is waited for)."""
        works, self._coalesced = self._coalesced or [], None
        if not works:
            return completed_work([], "coalescing")
        return works[0] if len(works) == 1 else GroupWork(works)

    # -- lifetime ----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Finish what was queued and stop (``destroy_process_group`` calls this)."""
        if self._shut_down:
            return
        self._shut_down = True
        try:
            self._comm._engine.drain()
        except Exception:  # noqa: BLE001 - an error of a queued call was reported to its Work
            pass
        self._completer.close()
        if self._launcher is not None:
            self._launcher.close()
        if self._gpu is not None:
            try:
                self._comm.synchronize()
            except Exception:  # noqa: BLE001 - reported by the calls' own waits
                pass

    def abort(self) -> None:
        """Poison the communicator: every rank's pending and later calls fail."""
        self._comm.abort("the torch process group was aborted")
        self._shut_down = True


def _check_tag(tag: int, call: str) -> None:
    if tag != 0:
        raise ArgumentError(f"forestcc {call}: tag must be 0 (forestcc matches the messages of two "
                            f"ranks in the order they are posted), got {tag}")


# A call this layer refuses takes its place (_refusing).
for _name in ("allreduce", "allreduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_single",
              "_reduce_scatter_base", "reduce_scatter_single_coalesced", "broadcast", "allgather",
              "allgather_coalesced", "all_gather_single", "_allgather_base", "all_gather_single_coalesced",
              "gather", "scatter", "alltoall", "all_to_all_single", "alltoall_base", "barrier"):
    setattr(ProcessGroupForestcc, _name, _refusing(getattr(ProcessGroupForestcc, _name)))
ProcessGroupForestcc.send = _refusing(ProcessGroupForestcc.send, _refuse_send)
ProcessGroupForestcc.recv = _refusing(ProcessGroupForestcc.recv, _refuse_recv)


def _no_handle(result: Any) -> list:
    """The handles of a synchronous send/recv: none. forestcc returns None (send) or the output
    array (recv) there, not a handle for the Work to poll."""
    del result
    return []
