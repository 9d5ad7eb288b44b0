"""Algorithm and bus bandwidth, with nccl-tests' formulas.

algbw = S / t, where S is the table's size column (the larger buffer). busbw = algbw × a factor
that makes the number comparable with a link's bandwidth: an optimal ring all_reduce moves
2(n-1)/n of the buffer through each rank's link, so its busbw equals the slowest link's speed.
Units: GB/s = 1e9 bytes per second, time in microseconds.
"""
from __future__ import annotations


def bus_factor(collective: str, nranks: int) -> float:
    if nranks <= 0:
        raise ValueError(f"nranks must be positive, got {nranks}")
    if collective == "all_reduce":
        return 2.0 * (nranks - 1) / nranks
    if collective in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (nranks - 1) / nranks
    if collective in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


def algbw_gbps(size_bytes: int, time_us: float) -> float:
    return size_bytes / (time_us * 1e3) if time_us > 0 else 0.0


def busbw_gbps(collective: str, size_bytes: int, time_us: float, nranks: int) -> float:
    return algbw_gbps(size_bytes, time_us) * bus_factor(collective, nranks)
