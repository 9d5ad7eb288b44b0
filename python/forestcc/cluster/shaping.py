"""Shaping a host's link with tc: a token bucket (tbf) or one htb class on both ends of its veth,
so the rate holds in both directions (the bridge side's egress is what the host receives, the
host side's egress what it sends).

tbf's `latency` is how long a packet may wait in the bucket's queue before it is dropped (the
queue's size), not an added delay: adding delay needs netem, which this kernel does not have.
The burst must hold at least one segmentation-offload packet (64 KiB) or big sends stall; the
default is 2 ms worth of the rate, at least 256 KiB."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from .system import run_tool

__all__ = ["Shaping", "parse_rate", "apply_shaping"]

_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_rate(text: str) -> float:
    """bits per second of a tc rate such as 1gbit, 500mbit, 10Gbit (bytes: 100mbps is not taken:
    tc's "bps" means bytes, a trap; say "bit")."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)bit\s*", text.lower())
    if not m:
        raise ValueError(f"a rate is a number and kbit, mbit, gbit or tbit (e.g. 1gbit), "
                         f"got {text!r}")
    value = float(m[1]) * _UNITS[m[2]]
    if value <= 0:
        raise ValueError(f"a rate must be positive, got {text!r}")
    return value


def _parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]+)\s*(b|kb|k|mb|m|kib|mib)?\s*", text.lower())
    if not m:
        raise ValueError(f"a size is bytes with an optional kb/mb (e.g. 256kb), got {text!r}")
    scale = {None: 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20,
             "mib": 1 << 20}[m[2]]
    return int(m[1]) * scale


@dataclass
class Shaping:
    """The shaping of every host link: rate (a tc rate: "1gbit"), burst (bytes or "256kb"),
    latency (tbf queue limit, a tc time: "50ms"), qdisc ("tbf" or "htb")."""
    rate: str
    burst: str | None = None
    latency: str = "50ms"
    qdisc: str = "tbf"

    def __post_init__(self):
        self.bits_per_second = parse_rate(self.rate)
        if self.qdisc not in ("tbf", "htb"):
            raise ValueError(f"qdisc must be tbf or htb (netem is not available), "
                             f"got {self.qdisc!r}")
        if not re.fullmatch(r"[0-9.]+(us|ms|s)", self.latency):
            raise ValueError(f"latency is a tc time such as 50ms, got {self.latency!r}")
        self.burst_bytes = (_parse_size(self.burst) if self.burst is not None
                            else max(256 << 10, int(self.bits_per_second / 8 * 0.002)))

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("bits_per_second", None)
        d.pop("burst_bytes", None)
        return d


def _qdisc_commands(dev: str, s: Shaping) -> list[list[str]]:
    rate = f"{int(s.bits_per_second)}bit"
    if s.qdisc == "tbf":
        return [["qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                 "burst", str(s.burst_bytes), "latency", s.latency]]
    return [["qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10"],
            ["class", "replace", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
             "rate", rate, "ceil", rate, "burst", str(s.burst_bytes),
             "cburst", str(s.burst_bytes)]]


def apply_shaping(bridge_side: str, netns: str, s: Shaping) -> None:
    """Shapes both directions of one host link: `bridge_side` in this namespace, eth0 in `netns`."""
    for cmd in _qdisc_commands(bridge_side, s):
        run_tool("tc", *cmd)
    for cmd in _qdisc_commands("eth0", s):
        run_tool("tc", "-n", netns, *cmd)
