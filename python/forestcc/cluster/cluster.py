"""An emulated cluster: H hosts (host.py) on one Linux bridge in this machine's namespace, which
holds the subnet's .1 so this machine (an mpirun, a test) reaches every host too.

    with Cluster.create(hosts=2, shaping=Shaping("1gbit")) as c:
        c.run("h0", ["hostname"])                       # -> h0
        c.job(2, ["python", "prog.py"])                 # 2 ranks per host through forestcc-run
        c.cut("h1", after=3.5)                          # h1's link goes down in 3.5 s

Its description lives in /run/forestcc-cluster/<id>/cluster.json, so other processes attach to
it by id (`Cluster.attach`, `forestcc-run --cluster`, `forestcc-cluster exec`)."""
from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import threading

from . import names
from .host import Host, create_host, destroy_host
from .owner import current_owner, owner_alive
from .shaping import Shaping, apply_shaping
from .subnet import choose_subnet, gateway_address, host_address, subnet6_for
from .system import ClusterError, require_privileges, run_tool

__all__ = ["Cluster", "list_clusters", "clean"]

_STATE_FILE = "cluster.json"


@contextlib.contextmanager
def _cluster_lock():
    """Serializes the choice of subnets and names among every cluster made on this machine."""
    names.STATE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(names.STATE_ROOT / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _mount_points() -> set[str]:
    with open("/proc/self/mountinfo") as f:
        return {line.split()[4] for line in f}


class Cluster:
    """A handle on an emulated cluster (made here by `create`, or another's by `attach`)."""

    def __init__(self, state: dict):
        self.state = state
        self.id: str = state["id"]
        self.bridge: str = state["bridge"]
        self.subnet = ipaddress.ip_network(state["subnet"])
        self.gateway = str(gateway_address(self.subnet))
        self.hosts = [Host(**h) for h in state["hosts"]]
        self.shaping = Shaping(**state["shaping"]) if state.get("shaping") else None
        self.dir = names.state_dir(self.id)

    # --- making, finding and taking down -------------------------------------------------------

    @classmethod
    def create(cls, hosts: int, *, shaping: Shaping | None = None,
               prefix: str = names.DEFAULT_PREFIX, persistent: bool = False) -> "Cluster":
        """Makes `hosts` hosts. `persistent` clusters have no owner and live until destroyed;
        others are leftovers (swept by the next create or by `clean`) once this process is
        gone. Raises ClusterError saying why when namespaces cannot be made."""
        if not 1 <= hosts <= names.MAX_HOSTS:
            raise ValueError(f"a cluster has 1 to {names.MAX_HOSTS} hosts, got {hosts}")
        require_privileges()
        clean(include_persistent=False)  # leftovers of crashed runs, of any prefix
        with _cluster_lock():
            cid = names.new_cluster_id(prefix)
            while names.state_dir(cid).exists():
                cid = names.new_cluster_id(prefix)
            subnet = choose_subnet()
            ipv6 = os.path.exists("/proc/sys/net/ipv6")
            subnet6 = subnet6_for(subnet) if ipv6 else None
            state = {"id": cid, "owner": None if persistent else current_owner(),
                     "bridge": names.bridge_name(cid), "subnet": str(subnet),
                     "subnet6": str(subnet6) if subnet6 else None, "hosts": [],
                     "shaping": shaping.to_json() if shaping else None}
            c = cls(state)
            c.dir.mkdir(parents=True)
            c._save()  # before anything exists: a crash from here on leaves a cluster to clean
            try:
                run_tool("ip", "link", "add", c.bridge, "type", "bridge")
                run_tool("ip", "addr", "add", f"{gateway_address(subnet)}/{subnet.prefixlen}",
                         "dev", c.bridge)
                if subnet6:
                    run_tool("ip", "-6", "addr", "add", f"{gateway_address(subnet6)}/64", "dev",
                             c.bridge, "nodad")
                run_tool("ip", "link", "set", c.bridge, "up")
            except BaseException:
                c.destroy()
                raise
        try:
            c._build(hosts, subnet, subnet6, shaping)
        except BaseException:
            c.destroy()
            raise
        return c

    def _build(self, count: int, subnet, subnet6, shaping: Shaping | None) -> None:
        # The state directory becomes a private mount of its own, so that the mount namespaces
        # bind-mounted into it do not propagate into themselves (the kernel refuses that loop).
        run_tool("mount", "--bind", str(self.dir), str(self.dir))
        run_tool("mount", "--make-private", str(self.dir))
        hosts_file = self.dir / "hosts"
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        for i in range(count):
            lines.append(f"{host_address(subnet, i)} {names.host_name(i)}")
            if subnet6:
                lines.append(f"{host_address(subnet6, i)} {names.host_name(i)}")
        hosts_file.write_text("\n".join(lines) + "\n")
        for i in range(count):
            # Recorded before it is made, so a failure halfway through is still taken down.
            planned = Host(name=names.host_name(i), index=i, netns=names.netns_name(self.id, i),
                           veth=names.veth_name(self.id, i), address="", address6="",
                           uts=str(self.dir / f"{names.host_name(i)}.uts"),
                           mnt=str(self.dir / f"{names.host_name(i)}.mnt"))
            self.hosts.append(planned)
            self._save()
            self.hosts[i] = create_host(self.id, i, host_address(subnet, i),
                                        host_address(subnet6, i) if subnet6 else "",
                                        subnet.prefixlen, self.bridge, self.dir, hosts_file)
            if shaping:
                apply_shaping(self.hosts[i].veth, self.hosts[i].netns, shaping)
        self._save()

    def _save(self) -> None:
        self.state["hosts"] = [h.to_json() for h in self.hosts]
        tmp = self.dir / (_STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.dir / _STATE_FILE)

    @classmethod
    def attach(cls, cluster_id: str) -> "Cluster":
        """The cluster with this id, made by any process on this machine."""
        path = names.state_dir(cluster_id) / _STATE_FILE
        try:
            return cls(json.loads(path.read_text()))
        except FileNotFoundError:
            known = ", ".join(c["id"] for c in list_clusters()) or "none"
            raise ClusterError(f"no emulated cluster {cluster_id!r} on this machine "
                               f"(clusters: {known})") from None

    def destroy(self) -> None:
        """Kills what runs in the hosts and removes every namespace, link, mount and file of the
        cluster. Safe to repeat and on a half-made cluster; raises ClusterError listing what
        could not be removed (after trying everything)."""
        errors = []
        for h in self.hosts:
            errors += destroy_host(h)
        if os.path.exists(f"/sys/class/net/{self.bridge}"):
            p = run_tool("ip", "link", "del", self.bridge, check=False)
            if p.returncode != 0:
                errors.append(f"ip link del {self.bridge}: {p.stderr.strip()}")
        if str(self.dir) in _mount_points():
            p = run_tool("umount", str(self.dir), check=False)
            if p.returncode != 0:
                errors.append(f"umount {self.dir}: {p.stderr.strip()}")
        if not errors:
            shutil.rmtree(self.dir, ignore_errors=True)
        if errors:
            raise ClusterError(f"cluster {self.id} not fully taken down: " + "; ".join(errors))

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    # --- using it -------------------------------------------------------------------------------

    def host(self, which: str | int | Host) -> Host:
        """A host by name ("h1"), index, address or <netns name>."""
        if isinstance(which, Host):
            return which
        for h in self.hosts:
            if str(which) in {h.name, str(h.index), h.address, h.address6, h.netns} - {""}:
                return h
        raise ClusterError(f"cluster {self.id} has no host {which!r} "
                           f"(hosts: {', '.join(h.name for h in self.hosts)})")

    def popen(self, host, argv: list[str], **kwargs) -> subprocess.Popen:
        """Starts `argv` inside a host (keyword arguments go to subprocess.Popen)."""
        return subprocess.Popen(self.host(host).enter_argv() + list(argv), **kwargs)

    def run(self, host, argv: list[str], timeout: float | None = 240, **kwargs
            ) -> subprocess.CompletedProcess:
        """Runs `argv` inside a host to completion, output captured as text by default."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.host(host).enter_argv() + list(argv), timeout=timeout,
                              **kwargs)

    def shm(self, host) -> list[str]:
        """The names in the host's own /dev/shm."""
        p = self.run(host, ["ls", "-A", "/dev/shm"])
        if p.returncode != 0:
            raise ClusterError(f"cannot list /dev/shm of {self.host(host).name}: {p.stderr}")
        return sorted(p.stdout.split())

    def cut(self, host, after: float | None = None) -> threading.Timer | None:
        """Takes the host's link down now, or `after` seconds from now (then returns the timer,
        which `cancel()` stops). Its packets are dropped until `restore`."""
        h = self.host(host)
        if after:
            t = threading.Timer(after, self.cut, (h,))
            t.daemon = True
            t.start()
            return t
        run_tool("ip", "link", "set", h.veth, "down")
        return None

    def restore(self, host) -> None:
        """Brings a cut link back up."""
        run_tool("ip", "link", "set", self.host(host).veth, "up")

    def link_is_up(self, host) -> bool:
        out = run_tool("ip", "-o", "link", "show", self.host(host).veth).stdout
        return "state UP" in out or ",UP" in out.split(">")[0]

    def host_list(self, ranks_per_host: int) -> str:
        """forestcc-run's --hosts for `ranks_per_host` ranks on every host."""
        return ",".join(f"{h.name}:{ranks_per_host}" for h in self.hosts)

    def launcher_argv(self, ranks_per_host: int, cmd: list[str],
                      launcher_args: tuple[str, ...] = ()) -> list[str]:
        """forestcc-run's command line for `cmd` on `ranks_per_host` ranks per host."""
        return [sys.executable, "-m", "forestcc.launcher", "--cluster", self.id, "--hosts",
                self.host_list(ranks_per_host), *launcher_args, "--", *cmd]

    def job(self, ranks_per_host: int, cmd: list[str], launcher_args: tuple[str, ...] = (),
            timeout: float | None = 240, **kwargs) -> subprocess.CompletedProcess:
        """Runs `cmd` as a forestcc job across every host, output captured as text."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.launcher_argv(ranks_per_host, cmd, launcher_args),
                              timeout=timeout, **kwargs)


def list_clusters(prefix: str | None = None) -> list[dict]:
    """The states of the clusters on this machine (of one prefix family when given), each with
    "alive": False for a leftover whose owner is gone."""
    out = []
    pattern = names.cluster_id_pattern(prefix)
    if not names.STATE_ROOT.is_dir():
        return out
    for d in sorted(names.STATE_ROOT.iterdir()):
        if not (d.is_dir() and pattern.fullmatch(d.name)):
            continue
        try:
            state = json.loads((d / _STATE_FILE).read_text())
        except (OSError, ValueError):
            # Made and crashed before its first save: only the directory exists.
            state = {"id": d.name, "owner": {"pid": 0, "start": None}, "bridge":
                     names.bridge_name(d.name), "subnet": "0.0.0.0/32", "hosts": []}
        state["alive"] = owner_alive(state.get("owner"))
        out.append(state)
    return out


def clean(prefix: str | None = None, *, include_persistent: bool = False,
          ids: list[str] | None = None) -> list[str]:
    """Takes down leftover clusters (their owner is gone) of a prefix family, also persistent
    ones when asked, or exactly the `ids` given. Returns the ids taken down."""
    done = []
    with _cluster_lock():
        for state in list_clusters(prefix):
            if ids is not None:
                if state["id"] not in ids:
                    continue
            elif state["alive"] and not (include_persistent and state.get("owner") is None):
                continue
            Cluster(state).destroy()
            done.append(state["id"])
        if ids is None:
            done += _clean_orphans(prefix)
    return done


def _clean_orphans(prefix: str | None) -> list[str]:
    """Namespaces and links named like a cluster's whose state directory is gone (removed by
    hand, say). Called under the cluster lock: a cluster being made has its directory first."""
    pattern = names.cluster_id_pattern(prefix)
    found = set()
    netns = run_tool("ip", "netns", "list").stdout.split()
    links = [line.split()[1].split("@")[0].rstrip(":")
             for line in run_tool("ip", "-o", "link").stdout.splitlines()]
    for name in netns + links:
        m = pattern.match(name)
        if m and not names.state_dir(m[1]).exists() and \
                re.fullmatch(re.escape(m[1]) + r"(-h\d+|h\d+|br)", name):
            found.add(name)
            if name in netns:
                run_tool("ip", "netns", "del", name, check=False)
            else:
                run_tool("ip", "link", "del", name, check=False)
    return sorted(found)
