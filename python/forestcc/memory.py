"""Arrays in shared memory: ``forestcc.empty`` and ``forestcc.zeros``.

They return ordinary numpy arrays whose memory is a POSIX shared-memory segment, so peers on the
same node map it and channels (and collectives) move data with direct loads and stores instead of
staging copies. The segment is unlinked when the array is freed, when the process exits or is
killed by a signal forestcc can catch; segments of SIGKILLed processes are swept by the next
forestcc process and by forestcc-run.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from forestcc import _C

__all__ = ["empty", "zeros"]


def empty(shape: int | tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """An uninitialized array in shared memory (like ``numpy.empty``)."""
    dt = np.dtype(dtype)
    shape_t = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(int(d) < 0 for d in shape_t):
        raise ValueError(f"shape: dimensions must be non-negative, got {shape_t}")
    count = math.prod(int(d) for d in shape_t)
    allocation = _C.SharedAllocation(count * dt.itemsize)
    return np.frombuffer(allocation, dtype=dt, count=count).reshape(shape_t)


def zeros(shape: int | tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """A zero-filled array in shared memory (fresh segments are zero-filled by the kernel)."""
    return empty(shape, dtype)
