"""Background lanes: one daemon thread per named lane, serving what is put on it in order.

The backend's Completer (collectives, sends and receives completing on their forestcc queues) and
its CudaLauncher (CUDA sends and receives made from one thread per direction) are both lanes of
threads with a shut-down; this is that one mechanism.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

__all__ = ["Lanes"]


class Lanes:
    """``put(lane, item)`` hands ``item`` to ``serve`` on the lane's thread, after everything put
    on that lane before it; the thread starts with the lane's first item."""

    def __init__(self, name: str, serve: Callable[[Any], None]):
        self._name = name
        self._serve = serve
        self._queues: dict[str, queue.SimpleQueue] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def put(self, lane: str, item: Any) -> None:
        """Queue ``item`` on ``lane`` (its thread starts with the lane's first item)."""
        q = self._queues.get(lane)
        if q is None:
            with self._lock:
                if self._closed:
                    raise dist.DistBackendError(f"forestcc {self._name}: the process group was shut down")
                q = self._queues.get(lane)
                if q is None:
                    q = queue.SimpleQueue()
                    t = threading.Thread(target=self._run, args=(q,), daemon=True,
                                         name=f"forestcc-{self._name}-{lane}")
                    t.start()
                    self._threads.append(t)
                    self._queues[lane] = q
        q.put(item)

    def close(self) -> None:
        """Stop the threads once they served what was put on their lanes."""
        with self._lock:
            self._closed = True
            for q in self._queues.values():
                q.put(None)
            threads, self._threads = self._threads, []
        for t in threads:
            if t is not threading.current_thread():
                t.join()

    def _run(self, q: queue.SimpleQueue) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            self._serve(item)
