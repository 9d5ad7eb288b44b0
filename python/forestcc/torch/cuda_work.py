"""torch ``Work`` for forestcc calls on CUDA tensors: stream semantics, as ProcessGroupNCCL's.

A forestcc call on GPU memory is enqueued on torch's current stream and returns (after the host
rendezvous with the peers); the call's finishing step (copies out of staging buffers, the
PREMUL_SUM factor) is enqueued right behind it on the same stream, then an event marks the end.
So nothing waits on the host:

- ``work.wait()`` makes the *current* stream wait for that event (a no-op on the stream the call
  was made on) and returns; it raises the call's error when the GPU already reported one.
  DDP and FSDP2 rely on this: they wait on works from their own streams.
- ``work.get_future()`` is a CUDA-aware ``torch.futures.Future``: it is done once enqueued, and
  ``value()``, ``wait()`` and ``then()`` callbacks make the consumer's current stream wait for
  the call (as NCCL's futures do, which DDP's communication hooks expect).
- ``work.is_completed()`` asks the event (the GPU finished), without blocking.

The host sees the GPU finish through ``torch.cuda.synchronize()`` or the stream's
``synchronize()``; an error on the GPU (a timeout, a dead peer) is raised by the next call of the
group, by ``group.communicator.synchronize()``, by ``barrier()`` or by ``wait()`` once the GPU is
past the call.

Send and receive on CUDA tensors go through :class:`CudaLauncher`: one thread per direction makes
the forestcc call on the caller's stream, synchronously (it waits on the host for the peer to
post its side, then enqueues the copy: the event after it covers the copy, which it would not
for a queued ``async_op=True`` call), so that ``isend`` followed by ``irecv`` on two ranks does
not wait for itself; ``work.wait()`` then first blocks until the call was enqueued.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from forestcc.torch.errors import translate
from forestcc.torch.lanes import Lanes

__all__ = ["CudaLauncher", "CudaWork", "enqueue_on_stream"]


class CudaWork(dist.Work):
    """The Work of one forestcc call enqueued on ``stream`` (see the module's docstring).
    ``handles``: forestcc's async handles of the call (polled for its error); ``value``: the
    output tensors. Made by :func:`enqueue_on_stream` or a :class:`CudaLauncher`."""

    def __init__(self, call: str, device: torch.device, stream: torch.cuda.Stream):
        super().__init__()
        self._call = call
        self._device = device
        self._stream = stream
        self._event: torch.cuda.Event | None = None
        self._handles: list[Any] = []
        self._value: list[torch.Tensor] = []
        self._future: torch.futures.Future | None = None
        self._error: BaseException | None = None
        self._enqueued = threading.Event()

    @property
    def device(self) -> torch.device:
        """The GPU the call runs on."""
        return self._device

    def _set_enqueued(self, handles: Sequence[Any], value: list[torch.Tensor],
                      event: torch.cuda.Event) -> None:
        self._handles, self._value, self._event = list(handles), value, event
        self._enqueued.set()

    def _set_failed(self, error: BaseException) -> None:
        self._error = error
        self._enqueued.set()

    def _wait_enqueued(self) -> None:
        # A launcher's call always ends: forestcc's own deadline bounds its host rendezvous.
        self._enqueued.wait()
        if self._error is not None:
            raise self._error

    def wait(self, timeout: Any = None) -> bool:
        """Make torch's current stream wait for the call (the host does not wait for the GPU);
        raise the call's error if it failed to start or the GPU reported one already."""
        self._wait_enqueued()
        torch.cuda.current_stream(self._device).wait_event(self._event)
        self._raise_reported()
        return True

    def synchronize(self) -> None:
        """As :meth:`wait`: the current stream waits for the call."""
        self.wait()

    def is_completed(self) -> bool:
        """Whether the GPU finished the call (or it failed), without blocking."""
        if not self._enqueued.is_set():
            return False
        return self._error is not None or self._event.query()

    def is_success(self) -> bool:
        """Whether the call finished on the GPU without an error."""
        return self.is_completed() and self.exception() is None

    def exception(self) -> BaseException | None:
        """The call's error once it is known (failed to start, or finished with one)."""
        if self._error is None and self.is_completed():
            try:
                self._raise_reported()
            except BaseException as exc:  # noqa: BLE001 - reported, not handled
                return exc
        return self._error

    def get_future(self) -> torch.futures.Future:
        """A CUDA-aware future of the output tensors: consumers' streams wait for the call."""
        if self._future is None:
            self._wait_enqueued()
            future = torch.futures.Future(devices=[self._device])
            # Marks the future on the call's stream: its events come after the call.
            with torch.cuda.stream(self._stream):
                future.set_result(self._value)
            self._future = future
        return self._future

    def result(self) -> list[torch.Tensor]:
        """The call's output tensors (the current stream waits for them)."""
        self.wait()
        return self._value

    def _raise_reported(self) -> None:
        if self._error is not None:
            raise self._error
        for h in self._handles:
            if h.is_completed():
                try:
                    h.wait()  # completed: returns at once, or raises the GPU's error
                except BaseException as exc:
                    self._error = translate(exc, self._call, started=True)
                    raise self._error from exc

    def __repr__(self) -> str:
        state = "completed" if self.is_completed() else "pending"
        return f"<forestcc.torch.CudaWork {self._call} on {self._device} {state}>"


def enqueue_on_stream(call: str, device: torch.device, start: Callable[[], Any],
                      finish: Callable[[], list], stream: torch.cuda.Stream | None = None,
                      work: CudaWork | None = None) -> CudaWork:
    """Run ``start()`` (a forestcc call on GPU memory, returning its handle or a list of them)
    and ``finish()`` (enqueueing the copies out of staging buffers; returns the outputs) with
    ``device`` current, on ``stream`` (default: torch's current stream of ``device``); return
    the call's :class:`CudaWork`. Errors of ``start`` propagate."""
    with torch.cuda.device(device):
        if stream is None:
            stream = torch.cuda.current_stream(device)
        if work is None:
            work = CudaWork(call, device, stream)
        with torch.cuda.stream(stream):
            handles = start()
            value = finish()
            event = torch.cuda.Event()
            event.record(stream)
    if not isinstance(handles, (list, tuple)):
        handles = [handles]
    work._set_enqueued([h for h in handles if h is not None], value, event)
    return work


class CudaLauncher:
    """Makes calls on GPU memory from one thread per ``lane`` ("send", "recv"), in the order
    they were added, each on the stream that was current when it was added."""

    def __init__(self, name: str):
        self._lanes = Lanes(f"{name}-cuda", _launch)

    def add(self, lane: str, call: str, device: torch.device, start: Callable[[], Any],
            finish: Callable[[], list]) -> CudaWork:
        """Queue a call; its Work is complete (on the host) once the call was enqueued."""
        stream = torch.cuda.current_stream(device)
        work = CudaWork(call, device, stream)
        self._lanes.put(lane, (work, start, finish))
        return work

    def close(self) -> None:
        """Stop the threads once they made what was queued."""
        self._lanes.close()


def _launch(item: tuple) -> None:
    work, start, finish = item
    try:
        enqueue_on_stream(work._call, work._device, start, finish, work._stream, work)
    except BaseException as exc:  # noqa: BLE001 - handed to the waiters
        work._set_failed(translate(exc, work._call))
