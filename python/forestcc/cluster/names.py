"""Names of an emulated cluster's resources: one cluster id names them all, so a cluster never
touches what belongs to another (another test run, another forestcc job, another user's netns).

A cluster id is a prefix (default "fcc") and six random hex digits, e.g. "fcc3f9a1c". Its hosts are
h0, h1, ...; its resources are
  network namespace   <id>-h<i>          (listed by `ip netns`)
  veth, bridge side   <id>h<i>           (in this machine's namespace; inside the host it is eth0)
  bridge              <id>br
  state directory     /run/forestcc-cluster/<id>/  (cluster.json, the hosts file, and the bind
                      mounts that keep each host's UTS and mount namespaces alive)
Interface names are limited to 15 characters by the kernel: the prefix is at most 5 letters, so
"<id>h<i>" fits for up to 1000 hosts.
"""
from __future__ import annotations

import re
import secrets
from pathlib import Path

__all__ = ["STATE_ROOT", "DEFAULT_PREFIX", "MAX_HOSTS", "new_cluster_id", "check_prefix",
           "cluster_id_pattern", "host_name", "netns_name", "veth_name", "bridge_name",
           "state_dir"]

STATE_ROOT = Path("/run/forestcc-cluster")
DEFAULT_PREFIX = "fcc"
# Host addresses are .2 to .254 of one /24 (.1 is the bridge, this machine's side).
MAX_HOSTS = 253
_PREFIX = re.compile(r"[a-z]{1,5}")


def check_prefix(prefix: str) -> str:
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"a cluster prefix is 1 to 5 lowercase letters, got {prefix!r}")
    return prefix


def new_cluster_id(prefix: str = DEFAULT_PREFIX) -> str:
    return check_prefix(prefix) + secrets.token_hex(3)


def cluster_id_pattern(prefix: str | None = None) -> re.Pattern:
    """Matches the cluster ids of one prefix family (any prefix when None)."""
    p = re.escape(check_prefix(prefix)) if prefix else "[a-z]{1,5}"
    return re.compile(f"({p}[0-9a-f]{{6}})")


def host_name(index: int) -> str:
    return f"h{index}"


def netns_name(cluster_id: str, index: int) -> str:
    return f"{cluster_id}-h{index}"


def veth_name(cluster_id: str, index: int) -> str:
    return f"{cluster_id}h{index}"


def bridge_name(cluster_id: str) -> str:
    return f"{cluster_id}br"


def state_dir(cluster_id: str) -> Path:
    return STATE_ROOT / cluster_id
