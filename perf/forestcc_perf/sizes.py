"""Message sizes: parsing ``8``, ``64K``, ``32M``, ``1G`` (binary suffixes, as nccl-tests) and
stepping from -b to -e by -f (multiply) or -i (add)."""
from __future__ import annotations

import re

_SIZE = re.compile(r"^(\d+)\s*([kmgtKMGT]?)(?:[iI]?[bB])?$")
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes in ``text``: a whole number with an optional K/M/G/T suffix (powers of 1024;
    ``KB``/``KiB`` also accepted). Raises ValueError with the reason."""
    m = _SIZE.match(str(text).strip())
    if not m:
        raise ValueError(f"not a size: {text!r} (use bytes, or a K/M/G suffix: 8, 64K, 32M)")
    return int(m.group(1)) * _SUFFIXES[m.group(2).upper()]


def size_steps(min_bytes: int, max_bytes: int, step_bytes: int, step_factor: int) -> list[int]:
    """The sizes from min to max inclusive: ×step_factor when it is above 1, else +step_bytes."""
    if min_bytes > max_bytes:
        raise ValueError(f"-b {min_bytes} is greater than -e {max_bytes}")
    if step_factor < 1:
        raise ValueError(f"-f must be at least 1, got {step_factor}")
    if step_factor == 1 and step_bytes <= 0:
        raise ValueError("-i must be positive when -f is 1 (the sizes would never grow)")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        if step_factor > 1:
            # from 0 a factor never grows; nccl-tests then moves on to 1 byte
            size = size * step_factor if size > 0 else 1
        else:
            size += step_bytes
    return sizes


def format_size(n: int) -> str:
    """Short human form for progress lines: 1048576 -> '1M'."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"
