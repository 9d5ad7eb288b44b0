"""torch ``Work`` objects for forestcc calls, and the threads that complete them.

A queued forestcc call returns a handle with ``wait()``; torch wants a ``Work`` whose
``get_future()`` completes (DDP's communication hooks chain on it) and whose ``wait()`` raises
the call's error. One :class:`Completer` thread per forestcc queue (collectives, sends,
receives: each runs its calls in order) waits for the handles in order, runs the call's
finishing step (copying results out of staging buffers, scaling) and completes the future.
Waiting in the queue's own order never holds back a call that finished earlier.

``torch._C._distributed_c10d._create_work_from_future`` is not used: its ``wait()`` does not
raise when the future holds an error.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from forestcc.torch.errors import translate

__all__ = ["ForestccWork", "Completer", "completed_work"]


class ForestccWork(dist.Work):
    """The Work of one forestcc call: ``wait()`` blocks until it completed and raises its
    error; ``get_future()`` completes with the call's output tensors."""

    def __init__(self, future: torch.futures.Future, call: str):
        super().__init__()
        self._future = future
        self._call = call

    def wait(self, timeout: Any = None) -> bool:
        """Block until the call completed; raise its error (DistBackendError...). forestcc's
        own deadline (``init_process_group(timeout=...)``) bounds the wait."""
        self._future.wait()
        return True

    def is_completed(self) -> bool:
        """Whether the call finished (successfully or not)."""
        return self._future.done()

    def is_success(self) -> bool:
        """Whether the call finished without an error."""
        return self.exception() is None and self._future.done()

    def exception(self) -> BaseException | None:
        """The call's error once it finished with one, else None."""
        if not self._future.done():
            return None
        try:
            self._future.value()
        except BaseException as exc:  # noqa: BLE001 - reported, not handled
            return exc
        return None

    def get_future(self) -> torch.futures.Future:
        """A future that completes with the call's output tensors (a list)."""
        return self._future

    def result(self) -> list[torch.Tensor]:
        """The call's output tensors (after :meth:`wait`)."""
        return self._future.wait()

    def synchronize(self) -> None:
        """Nothing to do: CPU tensors are complete when the call is."""

    def __repr__(self) -> str:
        state = "completed" if self._future.done() else "pending"
        return f"<forestcc.torch.ForestccWork {self._call} {state}>"


def completed_work(value: list[torch.Tensor], call: str) -> ForestccWork:
    """The Work of a call that already finished with ``value``."""
    future = torch.futures.Future()
    future.set_result(value)
    return ForestccWork(future, call)


class Completer:
    """Completes the futures of queued forestcc calls, one daemon thread per queue name."""

    def __init__(self, name: str):
        self._name = name
        self._queues: dict[str, queue.SimpleQueue] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def add(self, stream: str, handles: Sequence[Any], finish: Callable[[], list[torch.Tensor]],
            call: str) -> ForestccWork:
        """Complete a new Work once every handle of ``handles`` (queued on forestcc queue
        ``stream``, in order) finished and ``finish()`` returned the output tensors."""
        future = torch.futures.Future()
        self._queue(stream).put((list(handles), finish, future, call))
        return ForestccWork(future, call)

    def close(self) -> None:
        """Stop the threads once they completed what was queued."""
        with self._lock:
            self._closed = True
            for q in self._queues.values():
                q.put(None)
            threads, self._threads = self._threads, []
        for t in threads:
            if t is not threading.current_thread():
                t.join()

    def _queue(self, stream: str) -> queue.SimpleQueue:
        q = self._queues.get(stream)
        if q is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError(f"forestcc {self._name}: the process group was shut down")
                q = self._queues.get(stream)
                if q is None:
                    q = queue.SimpleQueue()
                    t = threading.Thread(target=_complete, args=(q,), daemon=True,
                                         name=f"forestcc-{self._name}-{stream}")
                    t.start()
                    self._threads.append(t)
                    self._queues[stream] = q
        return q


def _complete(q: queue.SimpleQueue) -> None:
    while True:
        item = q.get()
        if item is None:
            return
        handles, finish, future, call = item
        try:
            for h in handles:
                h.wait()
            value = finish()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiter
            future.set_exception(translate(exc, call, started=True))
            continue
        try:
            future.set_result(value)
        except BaseException:  # noqa: BLE001 - a failing callback belongs to its own future
            pass
