"""torch's ReduceOp and dtypes as forestcc reductions.

forestcc reduces int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, float64,
float8_e4m3fn and float8_e5m2 with sum, prod, min, max and avg. The other torch cases are brought to those:

- ``PREMUL_SUM(factor)``: a sum, then the result is multiplied by ``factor`` (one multiply per
  output element instead of one per input; floating-point tensors only);
- ``bool``: reduced as uint8 bytes: SUM and MAX are a logical or, PRODUCT and MIN a logical and;
- ``complex``: reduced as pairs of reals (SUM, AVG, PREMUL_SUM only);
- ``int16`` and ``uint16``: reduced in a 32-bit copy (sums and products wrap as in 16 bits).

``BAND``, ``BOR`` and ``BXOR`` are not supported (NotImplementedError).

The PREMUL_SUM factor is read with :func:`premul_sum_factor`: recent torch versions have
``ReduceOp.factor``; older ones (2.11) show it to Python only in the op's pickle state. A torch
that shows it neither way gets PREMUL_SUM refused (:data:`PREMUL_SUM_SUPPORTED` is False).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from forestcc.torch.errors import ArgumentTypeError, unsupported

__all__ = ["PREMUL_SUM_SUPPORTED", "Reduction", "premul_sum_factor", "resolve"]

_NATIVE = {torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
           torch.float32, torch.float64}
for _name in ("uint32", "uint64", "float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        _NATIVE.add(getattr(torch, _name))
_WIDENED = {torch.int16: torch.int32}
if hasattr(torch, "uint16"):
    _WIDENED[torch.uint16] = torch.int32

_OPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.PRODUCT: "prod",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.AVG: "avg",
}
_BOOL_OPS = {"sum": "max", "max": "max", "prod": "min", "min": "min"}


@dataclass(frozen=True)
class Reduction:
    """How one call reduces: forestcc's ``op`` over buffers of ``dtype``, then ``factor``
    (PREMUL_SUM) applied to the result. ``kind`` says how a tensor becomes such a buffer:
    "native" (itself), "bytes" (bool as uint8), "pairs" (complex as real pairs), "widened"
    (a copy in ``dtype``)."""

    op: str
    dtype: torch.dtype
    kind: str
    factor: Any = None

    def buffer(self, t: torch.Tensor) -> torch.Tensor:
        """A contiguous tensor forestcc can reduce holding ``t``'s values; it shares ``t``'s
        memory when it can (then :meth:`write_back` copies nothing)."""
        if t.requires_grad:
            t = t.detach()
        if self.kind == "widened":
            return t.reshape(-1).to(self.dtype)
        if not t.is_contiguous():
            t = t.contiguous()
        if self.kind == "bytes":
            return t.reshape(-1).view(torch.uint8)
        if self.kind == "pairs":
            return torch.view_as_real(t.reshape(-1)).reshape(-1)
        # reshape costs more than the rest of a small call: DDP's buckets are flat already
        return t if t.ndim == 1 else t.reshape(-1)

    def new_buffer(self, numel: int, device: torch.device) -> torch.Tensor:
        """An uninitialized buffer of ``numel`` elements of the tensor's kind on ``device``, as a
        reduction buffer (complex numbers count as one element)."""
        n = numel * 2 if self.kind == "pairs" else numel
        return torch.empty(n, dtype=self.dtype, device=device)

    def finish(self, buf: torch.Tensor) -> None:
        """Apply the PREMUL_SUM factor to a reduced buffer."""
        if self.factor is not None:
            if buf.is_floating_point() and buf.element_size() == 1:   # torch has no fp8 arithmetic
                buf.copy_(buf.float().mul_(self.factor))
            else:
                buf.mul_(self.factor)

    def write_back(self, buf: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy a reduced buffer into ``dst`` unless it is ``dst``'s own memory."""
        if buf.numel() and dst.numel() and buf.data_ptr() == dst.data_ptr() and dst.is_contiguous():
            return
        dst = dst.detach()  # a result, as gloo writes it: also into a parameter (a leaf that needs grad)
        if self.kind == "bytes":
            dst.copy_(buf.view(torch.bool).view(dst.shape))
        elif self.kind == "pairs":
            dst.copy_(torch.view_as_complex(buf.view(-1, 2)).view(dst.shape))
        else:
            dst.copy_(buf.view(dst.shape))


def resolve(op: Any, dtype: torch.dtype, call: str) -> Reduction:
    """The :class:`Reduction` for ``op`` (a ReduceOp, its RedOpType, or None for SUM) on
    tensors of ``dtype``; raises NotImplementedError / ArgumentTypeError naming ``call``."""
    kind_op = getattr(op, "op", op) if op is not None else dist.ReduceOp.SUM
    # Keyed by the enum's int value: hashing and comparing pybind enums costs microseconds,
    # a large part of a small call.
    kind = kind_op.value
    if kind != _PREMUL_SUM:
        key = (kind, dtype)
        found = _CACHE.get(key)
        if found is None:
            found = _CACHE[key] = _resolve(op, kind_op, dtype, call)
        return found
    return _resolve(op, kind_op, dtype, call)


_CACHE: dict = {}
_PREMUL_SUM = dist.ReduceOp.PREMUL_SUM.value


def _resolve(op: Any, kind_op: Any, dtype: torch.dtype, call: str) -> Reduction:
    factor = None
    if kind_op == dist.ReduceOp.PREMUL_SUM:
        factor = premul_sum_factor(op, call)
        name = "sum"
        if not (dtype.is_floating_point or dtype.is_complex):
            raise ArgumentTypeError(f"forestcc {call}: ReduceOp.PREMUL_SUM needs a floating-point "
                                    f"tensor, got {dtype}")
    else:
        name = _OPS.get(kind_op)
        if name is None:
            raise unsupported(call, f"ReduceOp.{getattr(kind_op, 'name', kind_op)}")
    if dtype in _NATIVE:
        return Reduction(name, dtype, "native", factor)
    if dtype == torch.bool:
        if name not in _BOOL_OPS:
            raise unsupported(call, f"ReduceOp.{name.upper()} on bool tensors")
        return Reduction(_BOOL_OPS[name], torch.uint8, "bytes")
    if dtype.is_complex:
        if name not in ("sum", "avg"):
            raise unsupported(call, f"ReduceOp.{str(kind_op).split('.')[-1]} on complex tensors")
        real = torch.float32 if dtype == torch.complex64 else torch.float64
        if dtype not in (torch.complex64, torch.complex128):
            raise unsupported(call, f"dtype {dtype}")
        return Reduction(name, real, "pairs", factor)
    if dtype in _WIDENED:
        return Reduction(name, _WIDENED[dtype], "widened", factor)
    raise unsupported(call, f"reducing dtype {dtype}")


def premul_sum_factor(op: Any, call: str) -> Any:
    """The factor (a number or a one-element tensor) of the PREMUL_SUM ReduceOp ``op``, as
    ``call`` received it. torch 2.13 has ``op.factor``; torch 2.11 has no such attribute, but
    its ReduceOp pickles as ``(RedOpType, factor)``, so ``__getstate__`` gives the factor there."""
    factor = getattr(op, "factor", None)
    if factor is not None:
        return factor
    try:  # (every Python object has a __getstate__; only torch's pickling gives this tuple)
        state = op.__getstate__()
    except (AttributeError, TypeError, RuntimeError):
        state = None
    if isinstance(state, tuple) and len(state) == 2 and state[1] is not None:
        return state[1]
    raise unsupported(call, f"ReduceOp.PREMUL_SUM with torch {torch.__version__} (its ReduceOp "
                            f"shows the factor to Python neither as .factor nor in its pickle "
                            f"state; use a SUM and scale the result)")


def _premul_sum_readable() -> bool:
    """Whether this torch shows a PREMUL_SUM op's factor to a Python backend."""
    make = getattr(dist, "_make_nccl_premul_sum", None)
    if make is None:
        return False
    try:
        return float(premul_sum_factor(make(0.25), "probe")) == 0.25
    except NotImplementedError:
        return False


#: Whether PREMUL_SUM works with this torch (otherwise it raises NotImplementedError naming the
#: torch version): what tests check, rather than a version number.
PREMUL_SUM_SUPPORTED = _premul_sum_readable()
