"""Who owns a cluster: the process that made it (pid and start time, so a reused pid is not
taken for the owner), or nobody for a cluster made by `forestcc-cluster up`, which lives until
`forestcc-cluster down`. A cluster whose owner is gone is a leftover of a crashed run: anyone
may take it down (`forestcc-cluster clean`, and every new cluster sweeps them first)."""
from __future__ import annotations

import os

__all__ = ["current_owner", "owner_alive"]


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])  # field 22 of stat: start time in clock ticks since boot


def current_owner() -> dict:
    return {"pid": os.getpid(), "start": _start_time(os.getpid())}


def owner_alive(owner: dict | None) -> bool:
    """True for a persistent cluster (no owner) and for one whose owner still runs."""
    if owner is None:
        return True
    return _start_time(owner["pid"]) == owner["start"]
