"""Where forestcc-run puts ranks across hosts: the host list (`--hosts h1:2,h2:2` or a hostfile)
and the placement of ranks on it, host after host (block), as mpirun places them by slot."""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["HostSlots", "Placement", "parse_hosts", "read_hostfile", "place"]


@dataclass(frozen=True)
class HostSlots:
    name: str
    slots: int


@dataclass(frozen=True)
class Placement:
    rank: int
    host: str
    local_rank: int
    local_size: int


# host, host:N, [v6addr], [v6addr]:N
_ENTRY = re.compile(r"(\[[0-9a-fA-F:.]+\]|[^\s,:\[\]]+)(?::(\d+))?")


def _entry(text: str, where: str) -> HostSlots:
    m = _ENTRY.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{where}: {text.strip()!r} is not HOST or HOST:SLOTS")
    slots = int(m[2]) if m[2] is not None else 1
    if slots < 1:
        raise ValueError(f"{where}: {text.strip()!r} has no slots (SLOTS must be at least 1)")
    return HostSlots(m[1].strip("[]"), slots)


def parse_hosts(text: str) -> list[HostSlots]:
    """"h1:2,h2:2" -> two hosts of two slots each; a host without :N has one slot."""
    hosts = [_entry(item, "--hosts") for item in text.split(",") if item.strip()]
    if not hosts:
        raise ValueError("--hosts: no host given")
    return _merged(hosts)


def read_hostfile(path: str) -> list[HostSlots]:
    """One host a line: `host`, `host:N` or Open MPI's `host slots=N`; # starts a comment."""
    hosts = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            where = f"{path}:{number}"
            name, *options = line.split()
            slots = 1
            for opt in options:
                key, _, value = opt.partition("=")
                if key in ("slots", "max_slots") and value.isdigit():
                    slots = int(value) if key == "slots" else slots
                else:
                    raise ValueError(f"{where}: unknown option {opt!r} (expected slots=N)")
            entry = _entry(name, where)
            hosts.append(HostSlots(entry.name, slots if options else entry.slots))
    if not hosts:
        raise ValueError(f"{path}: no host in the hostfile")
    return _merged(hosts)


def _merged(hosts: list[HostSlots]) -> list[HostSlots]:
    """A host named twice gets the sum of its slots, at its first place."""
    slots: dict[str, int] = {}
    for h in hosts:
        slots[h.name] = slots.get(h.name, 0) + h.slots
    return [HostSlots(name, n) for name, n in slots.items()]


def place(hosts: list[HostSlots], n: int | None) -> list[Placement]:
    """Ranks 0..n-1 on the hosts in order, each host filled before the next; n defaults to every
    slot. More ranks than slots is an error (a typo, not oversubscription)."""
    total = sum(h.slots for h in hosts)
    n = total if n is None else n
    if not 1 <= n <= total:
        raise ValueError(f"-n {n} does not fit the hosts' {total} slot(s)")
    out: list[Placement] = []
    for h in hosts:
        count = min(h.slots, n - len(out))
        out += [Placement(len(out) + i, h.name, i, count) for i in range(count)]
    return out
