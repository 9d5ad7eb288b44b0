"""torch ``Work`` objects for forestcc calls, and the threads that complete them.

A queued forestcc call returns a handle with ``wait()``; torch wants a ``Work`` whose
``get_future()`` completes by itself (DDP's communication hooks chain on it) and whose ``wait()``
raises the call's error. Each queued call becomes a :class:`Pending` completion: wait for the
handles, run the call's finishing step (copying results out of staging buffers, scaling) and
complete the future, exactly once, by whichever thread gets there first: the :class:`Completer`
thread of its forestcc queue (collectives, sends, receives: each runs its calls in order, so
waiting in that order never holds back a call that finished earlier), or a thread calling
``Work.wait()`` (which then does not wait for the completer to wake up).

``torch._C._distributed_c10d._create_work_from_future`` is not used: its ``wait()`` does not
raise when the future holds an error.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from forestcc.torch.errors import translate
from forestcc.torch.lanes import Lanes

__all__ = ["Completer", "ForestccWork", "GroupWork", "Pending", "completed_work"]


class Pending:
    """The completion of one queued call: ``handles`` to wait for, then ``finish()`` returns
    the output tensors that complete ``future``."""

    __slots__ = ("_done", "_lock", "call", "finish", "future", "handles")

    def __init__(self, handles: Sequence[Any], finish: Callable[[], list[torch.Tensor]],
                 call: str):
        self.handles = list(handles)
        self.finish = finish
        self.future = torch.futures.Future()
        self.call = call
        self._lock = threading.Lock()
        self._done = False

    def complete(self) -> None:
        """Wait for the call and complete the future (with its outputs or its error), unless
        another thread did already."""
        if self._done:
            return
        with self._lock:
            if self._done:
                return
            try:
                for h in self.handles:
                    h.wait()
                value = self.finish()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiters
                self._done = True
                self.future.set_exception(translate(exc, self.call, started=True))
                return
            finally:
                self.handles, self.finish = [], None
            self._done = True
        try:
            self.future.set_result(value)
        except BaseException:  # noqa: BLE001 - a failing callback belongs to its own future
            pass


class ForestccWork(dist.Work):
    """The Work of one forestcc call: ``wait()`` blocks until it completed and raises its
    error; ``get_future()`` completes with the call's output tensors. A call that already
    finished carries its outputs (``value``) instead of a :class:`Pending`."""

    def __init__(self, call: str, pending: Pending | None = None,
                 value: list[torch.Tensor] | None = None):
        super().__init__()
        self._call = call
        self._pending = pending
        self._value = value

    def wait(self, timeout: Any = None) -> bool:
        """Block until the call completed; raise its error (DistBackendError...). forestcc's
        own deadline (``init_process_group(timeout=...)``) bounds the wait."""
        if self._pending is not None:
            self._pending.complete()
            self._pending.future.wait()
        return True

    def is_completed(self) -> bool:
        """Whether the call finished (successfully or not)."""
        return self._pending is None or self._pending.future.done()

    def is_success(self) -> bool:
        """Whether the call finished without an error."""
        return self.is_completed() and self.exception() is None

    def exception(self) -> BaseException | None:
        """The call's error once it finished with one, else None."""
        if self._pending is None or not self._pending.future.done():
            return None
        try:
            self._pending.future.value()
        except BaseException as exc:  # noqa: BLE001 - reported, not handled
            return exc
        return None

    def get_future(self) -> torch.futures.Future:
        """A future that completes with the call's output tensors (a list)."""
        if self._pending is None:
            self._pending = Pending([], lambda: self._value, self._call)
            self._pending.complete()
        return self._pending.future

    def result(self) -> list[torch.Tensor]:
        """The call's output tensors (after :meth:`wait`)."""
        if self._pending is None:
            return self._value
        self.wait()
        return self._pending.future.value()

    def synchronize(self) -> None:
        """Nothing to do: CPU tensors are complete when the call is."""

    def __repr__(self) -> str:
        state = "completed" if self.is_completed() else "pending"
        return f"<forestcc.torch.ForestccWork {self._call} {state}>"


class GroupWork(dist.Work):
    """The Work of several calls (those made between ``_start_coalescing`` and
    ``_end_coalescing``, e.g. torch's ``batch_isend_irecv`` on CUDA): ``wait()`` waits for each;
    the future completes with every call's outputs, in call order."""

    def __init__(self, works: Sequence[dist.Work]):
        super().__init__()
        self._works = list(works)

    def wait(self, timeout: Any = None) -> bool:
        """Wait for every call (CPU: block; CUDA: the current stream waits); raise the first
        error."""
        for w in self._works:
            w.wait()
        return True

    def is_completed(self) -> bool:
        """Whether every call finished."""
        return all(w.is_completed() for w in self._works)

    def is_success(self) -> bool:
        """Whether every call finished without an error."""
        return all(w.is_success() for w in self._works)

    def exception(self) -> BaseException | None:
        """The first error among the calls, once known."""
        for w in self._works:
            exc = w.exception()
            if exc is not None:
                return exc
        return None

    def get_future(self) -> torch.futures.Future:
        """A future of every call's output tensors, one list in call order."""
        futures = [w.get_future() for w in self._works]
        devices = {getattr(w, "device", None) for w in self._works}
        if None in devices:  # calls on the CPU: complete when the last one does
            both = torch.futures.collect_all(futures)
            return both.then(lambda f: [t for fut in f.value() for t in fut.value()])
        # CUDA calls: their futures are done once enqueued; wait() makes the current stream
        # wait for each, and the new future is marked on that stream, after all of them.
        values = [t for fut in futures for t in fut.wait()]
        future = torch.futures.Future(devices=sorted(devices, key=str))
        future.set_result(values)
        return future

    def synchronize(self) -> None:
        """As :meth:`wait`."""
        self.wait()


def completed_work(value: list[torch.Tensor], call: str) -> ForestccWork:
    """The Work of a call that already finished with ``value``."""
    return ForestccWork(call, value=value)


class Completer:
    """Completes queued calls in the background, one daemon thread per forestcc queue."""

    def __init__(self, name: str):
        self._lanes = Lanes(name, Pending.complete)

    def add(self, stream: str, handles: Sequence[Any], finish: Callable[[], list[torch.Tensor]],
            call: str) -> ForestccWork:
        """The Work of a call whose ``handles`` were queued on forestcc queue ``stream``;
        ``finish()`` runs once they completed and returns the output tensors."""
        pending = Pending(handles, finish, call)
        self._lanes.put(stream, pending)
        return ForestccWork(call, pending)

    def close(self) -> None:
        """Stop the threads once they completed what was queued."""
        self._lanes.close()
