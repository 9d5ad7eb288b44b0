"""Tensors as the flat buffers forestcc moves, and argument checks shared by the calls.

Collectives that only move data (broadcast, gathers, scatters, all-to-all, send/recv) see every
tensor as its bytes, so any dtype works (bool, complex, int16, float8...). A contiguous tensor is
passed as it is (zero copy); a non-contiguous one goes through a contiguous copy that is written
back when the call completes. Tensors are CPU or CUDA tensors, all of one call on one device
(:func:`call_device`); staging buffers are made on that device.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from forestcc.torch.errors import ArgumentError, ArgumentTypeError, unsupported

__all__ = [
    "as_bytes",
    "byte_buffer",
    "call_device",
    "check_same",
    "check_tensor",
    "copy_bytes_into",
    "host",
    "named_list",
    "new_bytes",
    "one_tensor",
    "pack_bytes",
]

_CPU = torch.device("cpu")
# dtypes whose tensors forestcc gets as numpy views: cheaper for it to read than DLPack
_NUMPY_DTYPES = {torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32,
                 torch.float64}


def check_tensor(t: object, call: str, arg: str) -> torch.Tensor:
    """``t`` if it is a strided CPU or CUDA tensor, else the error naming ``call`` and ``arg``."""
    if not isinstance(t, torch.Tensor):
        raise ArgumentTypeError(f"forestcc {call}: {arg} must be a torch.Tensor, got "
                                f"{type(t).__name__}")
    if not (t.is_cpu or t.is_cuda):  # (device.type costs more than the rest of the check)
        raise unsupported(call, f"a tensor on {t.device} ({arg}; forestcc moves CPU and CUDA "
                                f"tensors)")
    if t.layout is not torch.strided:
        raise unsupported(call, f"a {t.layout} tensor ({arg})")
    return t


def call_device(call: str, named: Sequence[tuple[str, torch.Tensor | None]]) -> torch.device:
    """The one device of a call's tensors (``(argument, tensor)`` pairs; None and empty lists
    are skipped); CPU when there are none. Mixed CPU and CUDA tensors, or two GPUs, raise an
    error naming both arguments."""
    first_arg, first = None, None
    for arg, t in named:
        if t is None:
            continue
        if first is None:
            first_arg, first = arg, t.device
        elif t.device != first:
            raise ArgumentTypeError(
                f"forestcc {call}: {arg} is on {t.device} but {first_arg} is on {first}; the "
                f"tensors of one call must all be on the CPU or all on the same GPU")
    return first if first is not None else _CPU


def named_list(arg: str, tensors: Sequence[torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """``(arg[i], tensor)`` pairs for :func:`call_device`."""
    return [(f"{arg}[{i}]", t) for i, t in enumerate(tensors)]


def one_tensor(tensors: Sequence[torch.Tensor], call: str, arg: str = "tensors") -> torch.Tensor:
    """The single tensor of a per-device list (torch's API passes one tensor per process)."""
    if len(tensors) != 1:
        raise ArgumentError(f"forestcc {call}: expects exactly one tensor in {arg} (one per "
                            f"process), got {len(tensors)}")
    return check_tensor(tensors[0], call, arg)


def check_same(tensors: Sequence[torch.Tensor], like: torch.Tensor, call: str, arg: str) -> None:
    """Every tensor of ``tensors`` has ``like``'s dtype and number of elements."""
    for i, t in enumerate(tensors):
        check_tensor(t, call, f"{arg}[{i}]")
        if t.dtype != like.dtype:
            raise ArgumentTypeError(f"forestcc {call}: {arg}[{i}] has dtype {t.dtype}, expected "
                                    f"{like.dtype}")
        if t.numel() != like.numel():
            raise ArgumentError(f"forestcc {call}: {arg}[{i}] has {t.numel()} elements, expected "
                                f"{like.numel()}")


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a contiguous tensor, as a flat uint8 tensor sharing its memory."""
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    flat = t.reshape(-1)
    if flat.numel() <= 1 and flat.stride(0) != 1:
        # torch calls a one-element tensor contiguous whatever its stride (m[0:1, 0]), and
        # keeps that stride through reshape; its bytes are one element all the same
        flat = flat.as_strided((flat.numel(),), (1,))
    return flat.view(torch.uint8)


def byte_buffer(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(flat bytes of ``t``, whether they are a copy that must be written back with
    :func:`copy_bytes_into`)."""
    if t.is_contiguous():
        return as_bytes(t), False
    return as_bytes(t.contiguous()), True


def copy_bytes_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy flat bytes ``src`` into tensor ``dst`` (any dtype, any layout)."""
    if dst.is_contiguous():
        as_bytes(dst).copy_(src)
    else:
        tmp = torch.empty_like(dst, memory_format=torch.contiguous_format)
        as_bytes(tmp).copy_(src)
        dst.detach().copy_(tmp)  # a result, as gloo writes it: also into a parameter (a leaf that needs grad)


def new_bytes(n: int, device: torch.device) -> torch.Tensor:
    """An uninitialized staging buffer of ``n`` bytes on ``device``."""
    return torch.empty(n, dtype=torch.uint8, device=device)


def pack_bytes(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    """The bytes of ``tensors`` one after another in a new buffer (on their device), and each
    one's byte offset."""
    offsets, total = [], 0
    for t in tensors:
        offsets.append(total)
        total += t.numel() * t.element_size()
    out = new_bytes(total, tensors[0].device if len(tensors) else _CPU)
    for t, off in zip(tensors, offsets):
        n = t.numel() * t.element_size()
        if n:
            copy_src = t if t.is_contiguous() else t.contiguous()
            out[off:off + n].copy_(as_bytes(copy_src))
    return out, offsets


def host(x: torch.Tensor | None):
    """What forestcc is handed for a flat contiguous tensor (or None): for a CPU tensor a numpy
    view of the same memory, or the tensor itself (DLPack) for dtypes numpy lacks (bfloat16...);
    a CUDA tensor as it is (forestcc enqueues the call on torch's current stream)."""
    if x is None:
        return None
    return x.numpy() if x.dtype in _NUMPY_DTYPES and x.is_cpu else x
