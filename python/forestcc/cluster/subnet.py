"""Choosing a cluster's subnets: a private IPv4 /24 that nothing on this machine routes or uses
(another cluster's bridge included), and an IPv6 unique-local /64 derived from it.

The bridge (this machine's side) is .1 and host i is .(i+2). The caller holds the cluster lock
while choosing and until its bridge has the address, so two clusters made at once never pick the
same subnet."""
from __future__ import annotations

import ipaddress
import json
import random

from .names import STATE_ROOT
from .system import ClusterError, run_tool

__all__ = ["choose_subnet", "subnet6_for", "host_address", "gateway_address"]

_POOL = ipaddress.ip_network("10.0.0.0/8")


def _taken() -> list[ipaddress.IPv4Network]:
    """Networks this machine already routes or addresses, and those of other clusters."""
    nets = []
    for argv in (("ip", "-4", "-o", "addr", "show"), ("ip", "-4", "route", "show", "table", "all")):
        for line in run_tool(*argv).stdout.splitlines():
            for word in line.split():
                try:
                    nets.append(ipaddress.ip_network(word, strict=False))
                except ValueError:
                    continue
    for state in STATE_ROOT.glob("*/cluster.json"):
        try:
            nets.append(ipaddress.ip_network(json.loads(state.read_text())["subnet"]))
        except (OSError, ValueError, KeyError):
            continue
    # "default" routes parse as nothing; 0.0.0.0/0 from a word like that would block everything.
    return [n for n in nets if n.version == 4 and n.prefixlen > 0]


def choose_subnet() -> ipaddress.IPv4Network:
    taken = _taken()
    rng = random.SystemRandom()
    for _ in range(1000):
        net = ipaddress.ip_network(f"10.{rng.randrange(1, 255)}.{rng.randrange(0, 256)}.0/24")
        if net.subnet_of(_POOL) and not any(net.overlaps(t) for t in taken):
            return net
    raise ClusterError("no free /24 in 10.0.0.0/8 for the cluster's hosts")


def subnet6_for(net: ipaddress.IPv4Network) -> ipaddress.IPv6Network:
    """fd46:6363:<b>:<c>::/64 for 10.<b>.<c>.0/24 (0x46 0x63 0x63 is "Fcc")."""
    b, c = net.network_address.packed[1:3]
    return ipaddress.ip_network(f"fd46:6363:{b:x}:{c:x}::/64")


def gateway_address(net):
    return net.network_address + 1


def host_address(net, index: int):
    return net.network_address + 2 + index
