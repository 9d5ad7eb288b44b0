"""Running the system tools that build a cluster (ip, tc, nsenter, unshare, mount), with errors
that say which command failed and why, and the check that they can be used at all."""
from __future__ import annotations

import os
import shutil
import subprocess

__all__ = ["ClusterError", "run_tool", "require_privileges", "TOOLS"]

TOOLS = ("ip", "tc", "nsenter", "unshare", "mount", "umount", "hostname")
# Generous: a tool that takes longer is stuck, not slow.
_TOOL_TIMEOUT = 120


class ClusterError(RuntimeError):
    """An emulated cluster could not be made, entered or taken down; the message says why."""


def run_tool(*argv: str, check: bool = True, input: str | None = None
             ) -> subprocess.CompletedProcess:
    """Runs one system command; a non-zero exit (when `check`) raises ClusterError quoting it."""
    try:
        p = subprocess.run(argv, input=input, capture_output=True, text=True,
                           timeout=_TOOL_TIMEOUT)
    except FileNotFoundError:
        raise ClusterError(f"{argv[0]!r} is not installed (needed: {', '.join(TOOLS)})") from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"`{' '.join(argv)}` did not finish in {_TOOL_TIMEOUT} s") from None
    if check and p.returncode != 0:
        why = (p.stderr or p.stdout).strip() or f"exit code {p.returncode}"
        raise ClusterError(f"`{' '.join(argv)}` failed: {why}")
    return p


def require_privileges() -> None:
    """Raises ClusterError saying why namespaces cannot be made here, if they cannot."""
    if os.geteuid() != 0:
        raise ClusterError("an emulated cluster needs root (network, UTS and mount namespaces, "
                           f"veth links and a bridge); running as uid {os.geteuid()}")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise ClusterError(f"an emulated cluster needs {', '.join(missing)} on PATH "
                           "(iproute2, util-linux)")
