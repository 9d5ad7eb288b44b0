"""GPU memory for collectives: what this build and machine offer, IPC-ready allocations, streams.

Collectives take GPU arrays like host ones (CuPy arrays, PyTorch CUDA tensors, anything with
``__cuda_array_interface__`` or CUDA DLPack): their buffers are shared with the peers' processes
through CUDA IPC, which works for any ``cudaMalloc`` allocation (CuPy's and PyTorch's caching
allocators included, but not PyTorch's ``expandable_segments``). :func:`empty` and :func:`zeros`
allocate such memory directly.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from forestcc import _C

__all__ = ["built_with_cuda", "device_count", "is_available", "empty", "zeros", "stream_handle"]


def built_with_cuda() -> bool:
    """Whether this forestcc was built with its CUDA sources (nvcc was found at build time)."""
    return _C.built_with_cuda()


def device_count() -> int:
    """Visible CUDA devices (0 without CUDA support, a driver or a GPU)."""
    return _C.cuda_device_count()


def is_available() -> bool:
    """Whether collectives can run on GPU memory here: built with CUDA and a GPU visible."""
    return built_with_cuda() and device_count() > 0


def empty(shape: int | tuple[int, ...], dtype: Any = np.float32, like: str = "cupy") -> Any:
    """An uninitialized array of device memory made with ``cudaMalloc`` on the current device
    (IPC-ready whatever the framework's allocator settings), as a CuPy array (``like="cupy"``)
    or a PyTorch CUDA tensor (``like="torch"``). The memory is freed with the array."""
    shape_t = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    if any(d < 0 for d in shape_t):
        raise ValueError(f"shape: dimensions must be non-negative, got {shape_t}")
    if like == "torch":
        import torch
        tdtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, np.dtype(dtype).name)
        itemsize = torch.empty((), dtype=tdtype).element_size()
        raw = _C.DeviceAllocation(math.prod(shape_t) * itemsize)
        flat = torch.as_tensor(raw, device="cuda")  # keeps `raw` alive
        return flat.view(tdtype).reshape(shape_t)
    if like == "cupy":
        import cupy
        dt = np.dtype(dtype)
        raw = _C.DeviceAllocation(math.prod(shape_t) * dt.itemsize)
        memory = cupy.cuda.UnownedMemory(raw.address, raw.size, raw)
        return cupy.ndarray(shape_t, dtype=dt, memptr=cupy.cuda.MemoryPointer(memory, 0))
    raise ValueError(f"like: expected 'cupy' or 'torch', got {like!r}")


def zeros(shape: int | tuple[int, ...], dtype: Any = np.float32, like: str = "cupy") -> Any:
    """Like :func:`empty`, zero-filled."""
    array = empty(shape, dtype, like)
    array.fill(0) if like == "cupy" else array.zero_()
    return array


def stream_handle(stream: Any, array: Any) -> int:
    """The ``cudaStream_t`` of a call on GPU memory: ``stream`` as given (an int, a
    ``torch.cuda.Stream``, a CuPy stream), or, for None, the current stream of ``array``'s
    framework (PyTorch, CuPy), else the stream its ``__cuda_array_interface__`` names, else the
    legacy default stream."""
    if stream is None:
        module = type(array).__module__
        if module.startswith("torch"):
            import torch
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # ~10x cheaper than a Stream
            if raw is not None:
                return int(raw(array.get_device()))
            return int(torch.cuda.current_stream(array.device).cuda_stream)
        if module.startswith("cupy"):
            import cupy
            return int(cupy.cuda.get_current_stream().ptr)
        interface = getattr(array, "__cuda_array_interface__", None)
        if isinstance(interface, dict) and interface.get("stream"):
            return int(interface["stream"])
        return 0
    if isinstance(stream, (int, np.integer)) and not isinstance(stream, bool):
        return int(stream)
    for attribute in ("cuda_stream", "ptr"):
        value = getattr(stream, attribute, None)
        if isinstance(value, (int, np.integer)):
            return int(value)
    raise TypeError(f"stream: expected None, an int cudaStream_t, a torch.cuda.Stream or a CuPy "
                    f"stream, got {type(stream).__name__}")
