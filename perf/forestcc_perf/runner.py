"""Measuring one row: nccl-tests' method on one backend.

For each placement (out of place, then in place): write the inputs, move this rank to a CPU of
its own (spread_cpu, below), run -w warm-up operations, then, after a barrier, -n timed
iterations of -m operations each (a sync after every operation with -z); time per operation =
elapsed / (n × m). The per-rank times are combined with the backend's own allreduce (-a: rank
0's, the average, min or max), outside the timed loop. Then -c checked operations: fresh inputs
(seed = check number), a cleared receive buffer, one operation, elements compared with
check.expected_output, #wrong summed over ranks.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

from forestcc_perf import check
from forestcc_perf.backends import Backend
from forestcc_perf.busbw import algbw_gbps, busbw_gbps
from forestcc_perf.collectives import Collective, DataType
from forestcc_perf.table import Measurement, Row

AVERAGE_MODES = {0: "rank0", 1: "avg", 2: "min", 3: "max"}


@dataclass
class Settings:
    iters: int = 20
    warmup_iters: int = 5
    agg_iters: int = 1
    average: int = 1
    check_iters: int = 1
    blocking: bool = False
    timeout_s: float = 0.0   # per-measurement watchdog; 0 = none
    cpu: int | None = None   # where this rank starts every placement (spread_cpu); None: anywhere


class Watchdog:
    """-T: ends this rank (exit 1) when one measurement runs longer than the timeout, naming it,
    so a hung peer fails the run instead of stalling it."""

    def __init__(self, seconds: float, rank: int):
        self.seconds, self.rank = seconds, rank
        self._timer: threading.Timer | None = None

    def start(self, what: str) -> None:
        if self.seconds > 0:
            self._timer = threading.Timer(self.seconds, self._expire, (what,))
            self._timer.daemon = True
            self._timer.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, what: str) -> None:
        sys.stderr.write(f"forestcc-perf: rank {self.rank}: timeout: {what} did not finish "
                         f"within {self.seconds:g} s (-T)\n")
        sys.stderr.flush()
        os._exit(1)


class Runner:
    def __init__(self, backend: Backend, coll: Collective, settings: Settings,
                 algo: str | None = None, label: str | None = None):
        self.backend, self.coll, self.s = backend, coll, settings
        self.algo = algo
        self.label = label or backend.name   # the backend column of the rows
        self.watchdog = Watchdog(settings.timeout_s, backend.rank)

    def message_bytes(self, size_bytes: int, dtype: DataType) -> int:
        """The row's size for a requested one: bytes of the larger buffer, as the engine counts
        a message when it matches tuning rules."""
        b, coll = self.backend, self.coll
        count = coll.count_for_size(size_bytes, dtype.itemsize, b.size)
        return max(coll.recv_elements(count, b.size), coll.send_elements(count, b.size)) * dtype.itemsize

    def measure(self, size_bytes: int, dtype: DataType, op: str, root: int) -> Row:
        b, coll = self.backend, self.coll
        count = coll.count_for_size(size_bytes, dtype.itemsize, b.size)
        size = self.message_bytes(size_bytes, dtype)
        placements = []
        for in_place in (False, True):
            if not b.supports_in_place(coll, in_place):
                placements.append(None)
                continue
            what = (f"{coll.name} {'in' if in_place else 'out-of'}-place {size} B {dtype.name} "
                    f"on backend {b.name}")
            self.watchdog.start(what)
            try:
                placements.append(self._placement(size, count, dtype, op, root, in_place))
            finally:
                self.watchdog.stop()
        return Row(self.label, self.algo, size, count, dtype.name, op if coll.reduces else "none",
                   root if coll.rooted else -1, placements[0], placements[1])

    def _buffers(self, count: int, dtype: DataType, in_place: bool):
        b, coll = self.backend, self.coll
        n_send, n_recv = coll.send_elements(count, b.size), coll.recv_elements(count, b.size)
        if not in_place:
            return b.empty(n_send, dtype), b.empty(n_recv, dtype), None
        whole = b.empty(max(n_send, n_recv), dtype)
        send_at, recv_at = coll.in_place_offsets(count, b.rank)
        return whole[send_at:send_at + n_send], whole[recv_at:recv_at + n_recv], whole

    def _placement(self, size: int, count: int, dtype: DataType, op: str, root: int,
                   in_place: bool) -> Measurement:
        b, coll, s = self.backend, self.coll, self.s
        send, recv, whole = self._buffers(count, dtype, in_place)
        b.zero(recv)
        b.write(send, check.input_values(coll, op, dtype, b.rank, b.size, count, seed=0))

        def one_op():
            return b.run(coll, send, recv, op, root, in_place)

        if s.cpu is not None:
            move_to_cpu(s.cpu)
        for _ in range(s.warmup_iters):
            one_op()
        b.sync()
        b.barrier()
        start = time.perf_counter()
        for _ in range(s.iters):
            for _ in range(s.agg_iters):
                one_op()
                if s.blocking:
                    b.sync()
        b.sync()
        local_us = (time.perf_counter() - start) * 1e6 / (s.iters * s.agg_iters)
        time_us = self._combine(local_us)

        wrong = None
        if s.check_iters > 0:
            local_wrong = 0
            for seed in range(1, s.check_iters + 1):
                b.zero(whole if whole is not None else recv)
                b.write(send, check.input_values(coll, op, dtype, b.rank, b.size, count, seed))
                result = one_op()
                b.sync()
                expected = check.expected_output(coll, op, dtype, b.rank, b.size, count, root,
                                                 seed)
                if expected is not None and result is not None:
                    local_wrong += check.count_wrong(b.to_host(result), expected, op,
                                                     dtype.name)
            wrong = round(b.allreduce_number(float(local_wrong), "sum"))
        return Measurement(time_us, algbw_gbps(size, time_us),
                           busbw_gbps(coll.name, size, time_us, b.size), wrong)

    def _combine(self, local_us: float) -> float:
        return combine_times(self.backend, self.s.average, local_us)


def spread_cpu(hosts: list[str], rank: int) -> int | None:
    """The CPU this rank starts each measurement on: its place among the ranks of its host in
    the CPUs it may use, or None where they outnumber those CPUs (they must share them; every
    library then yields) or the platform has no affinity calls.

    Why: a library whose ranks wait in the kernel (gloo's TCP sockets; forestcc's bootstrap,
    which carries the benchmark's time and #wrong sums) has each rank woken on the CPU of the
    rank that woke it, so afterwards two ranks often share one CPU while another idles, and a
    library that spins keeps them there: forestcc yields only after 50 us, the two ranks run in
    turn, the kernel's load balancer moves neither, and every step pays the spin (a 1 KiB
    all_reduce took 53-137 us instead of 1-4 us for hundreds of calls); Open MPI, which never
    yields, takes milliseconds per call until the balancer moves a rank. Started spread,
    whichever library ran before, a measurement starts as a fresh launch does; what a library
    then does to its own ranks stays in its figures."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    local = [r for r, host in enumerate(hosts) if host == hosts[rank]]
    if len(local) > len(allowed):
        return None
    return allowed[local.index(rank)]


def move_to_cpu(cpu: int) -> None:
    """Move the calling thread to ``cpu`` now, leaving its affinity as it was (the kernel migrates
    a thread at once when its mask excludes the CPU it is on)."""
    allowed = os.sched_getaffinity(0)
    if cpu in allowed and len(allowed) > 1:
        os.sched_setaffinity(0, {cpu})
        os.sched_setaffinity(0, allowed)


def combine_times(b: Backend, mode: int, local_us: float) -> float:
    """-a: the time reported for all ranks (0 rank 0's, 1 average, 2 min, 3 max), through the
    backend itself."""
    if mode == 0:
        return b.allreduce_number(local_us if b.rank == 0 else 0.0, "sum")
    if mode == 1:
        return b.allreduce_number(local_us, "sum") / b.size
    return b.allreduce_number(local_us, "min" if mode == 2 else "max")


class Progress:
    """A one-line progress bar on stderr, only when stderr is a terminal (and only on rank 0),
    so logs and pipes get the table alone."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.done = total, 0
        self.enabled = enabled and total > 0 and sys.stderr.isatty()

    def step(self, label: str) -> None:
        if not self.enabled:
            return
        self.done += 1
        width = 30
        filled = width * self.done // self.total
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] "
                         f"{self.done}/{self.total} {label:<40}")
        sys.stderr.flush()

    def clear(self) -> None:
        """Erase the bar (before a table row is printed; the next step redraws it)."""
        if self.enabled:
            sys.stderr.write("\r" + " " * 90 + "\r")
            sys.stderr.flush()
