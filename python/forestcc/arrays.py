"""Adapters from user arrays to (address, nbytes): buffer protocol, DLPack, ``__array_interface__``.

One place decides what forestcc accepts as memory, so registration and collectives agree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["HostView", "host_view"]


@dataclass(frozen=True)
class HostView:
    """A contiguous host array seen as bytes; ``array`` keeps the owner alive."""

    array: np.ndarray
    address: int
    nbytes: int


def host_view(obj: Any, *, name: str = "array", writable: bool = False) -> HostView:
    """Return a zero-copy numpy view of ``obj`` (numpy, anything with the buffer protocol, DLPack
    CPU tensors such as PyTorch and JAX arrays). Raises TypeError for unsupported objects and
    ValueError for non-contiguous or (when ``writable``) read-only memory, naming ``name``."""
    if hasattr(obj, "__cuda_array_interface__"):
        raise TypeError(
            f"{name}: GPU arrays (__cuda_array_interface__) are not supported by this build's "
            "host transports yet")
    arr = _as_numpy(obj, name)
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous (got strides {arr.strides} for shape "
                         f"{arr.shape}); pass a contiguous copy")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{name}: is read-only but forestcc must write into it")
    return HostView(arr, arr.__array_interface__["data"][0], arr.nbytes)


def _as_numpy(obj: Any, name: str) -> np.ndarray:
    if isinstance(obj, np.ndarray):
        return obj
    if hasattr(obj, "__dlpack__") and not isinstance(obj, (bytes, bytearray, memoryview)):
        try:
            return np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError) as exc:
            raise TypeError(f"{name}: cannot view this {type(obj).__name__} on the host "
                            f"through DLPack ({exc})") from exc
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(f"{name}: expected an array (numpy, PyTorch, JAX, or any object with "
                        f"the buffer protocol or DLPack), got {type(obj).__name__}") from None
    if not view.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")
    return np.asarray(view)
