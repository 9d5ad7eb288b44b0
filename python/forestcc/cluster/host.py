"""One emulated host: a network namespace joined to the cluster's bridge by a veth link (eth0
inside), its own hostname (a UTS namespace) and its own /dev/shm (a mount namespace with a fresh
tmpfs there, since /dev/shm is otherwise shared by every network namespace, and forestcc treats
ranks with the same hostname as one node sharing /dev/shm). /sys is remounted so it shows the
host's own interfaces, and /etc/hosts names every host of the cluster.

The namespaces outlive the commands run in them: the network namespace is bind-mounted by
`ip netns add` under /run/netns, the UTS and mount namespaces by `unshare` into the cluster's
state directory, so any number of commands can enter the same host (nsenter) and nothing keeps
running between them."""
from __future__ import annotations

import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .names import host_name, netns_name, veth_name
from .system import run_tool

__all__ = ["Host", "create_host", "destroy_host", "host_processes", "kill_host_processes"]


@dataclass
class Host:
    name: str          # h0, h1, ...: its hostname, and its name in every host's /etc/hosts
    index: int
    netns: str         # network namespace (ip netns)
    veth: str          # the bridge side of its link, in this machine's namespace
    address: str       # IPv4 of its eth0
    address6: str      # IPv6 (unique local) of its eth0
    uts: str           # bind mount of its UTS namespace
    mnt: str           # bind mount of its mount namespace

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"

    def enter_argv(self, cwd: str | None = None) -> list[str]:
        """The argv prefix that runs a command inside this host (it execs: same pid), in `cwd`
        (default: this process's working directory; entering a mount namespace otherwise
        starts in /, and the host's file system is this machine's)."""
        return ["nsenter", f"--net={self.netns_path}", f"--uts={self.uts}", f"--mount={self.mnt}",
                f"--wd={cwd or os.getcwd()}", "--"]

    def to_json(self) -> dict:
        return asdict(self)


def create_host(cluster_id: str, index: int, address, address6, prefixlen: int, bridge: str,
                state: Path, hosts_file: Path) -> Host:
    h = Host(name=host_name(index), index=index, netns=netns_name(cluster_id, index),
             veth=veth_name(cluster_id, index), address=str(address), address6=str(address6),
             uts=str(state / f"{host_name(index)}.uts"), mnt=str(state / f"{host_name(index)}.mnt"))
    run_tool("ip", "netns", "add", h.netns)
    run_tool("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.netns)
    run_tool("ip", "link", "set", h.veth, "master", bridge, "up")
    # nodad: the address is usable at once (duplicate detection would hold it for a second or
    # two, and there is nothing on a private bridge to collide with).
    batch = [f"addr add {h.address}/{prefixlen} dev eth0", "link set eth0 up", "link set lo up"]
    if h.address6:
        batch.append(f"addr add {h.address6}/64 dev eth0 nodad")
    run_tool("ip", "-n", h.netns, "-batch", "-", input="\n".join(batch) + "\n")
    for f in (h.uts, h.mnt):
        Path(f).touch()
    setup = (f"hostname {h.name} && mount -t tmpfs -o mode=1777 tmpfs /dev/shm && "
             f"mount -t sysfs sysfs /sys && mount --bind {hosts_file} /etc/hosts")
    run_tool("nsenter", f"--net={h.netns_path}", "--", "unshare", f"--uts={h.uts}",
             f"--mount={h.mnt}", "--propagation", "private", "sh", "-c", setup)
    return h


def _mount_points() -> set[str]:
    with open("/proc/self/mountinfo") as f:
        return {line.split()[4] for line in f}


def _namespace_ids(h: Host) -> set[tuple[str, int]]:
    """The host's namespaces as (kind, inode); a bind mount that is not (or no longer) there
    names nothing (the plain file under it would match no process)."""
    mounted = _mount_points()
    return {(kind, os.stat(path).st_ino)
            for kind, path in (("net", h.netns_path), ("mnt", h.mnt), ("uts", h.uts))
            if path in mounted}


def host_processes(h: Host) -> list[int]:
    """Processes running inside the host (in any of its namespaces)."""
    ids = _namespace_ids(h)
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for kind in ("net", "mnt", "uts"):
            try:
                inode = os.stat(f"/proc/{pid}/ns/{kind}").st_ino
            except OSError:
                break
            if (kind, inode) in ids:
                found.append(int(pid))
                break
    return found


def kill_host_processes(h: Host, timeout: float = 30.0) -> None:
    """SIGKILL everything running in the host and wait (bounded) until it is gone."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in host_processes(h) if p != os.getpid()]
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def destroy_host(h: Host) -> list[str]:
    """Takes the host down; returns what could not be undone (empty when all went)."""
    errors = []
    kill_host_processes(h)
    mounted = _mount_points()
    for f in (h.uts, h.mnt):
        if f in mounted:
            p = run_tool("umount", f, check=False)
            if p.returncode != 0:
                errors.append(f"umount {f}: {p.stderr.strip()}")
    if os.path.exists(h.netns_path):
        p = run_tool("ip", "netns", "del", h.netns, check=False)  # its veth pair goes with it
        if p.returncode != 0:
            errors.append(f"ip netns del {h.netns}: {p.stderr.strip()}")
    if os.path.exists(f"/sys/class/net/{h.veth}"):  # left if the netns was never made
        run_tool("ip", "link", "del", h.veth, check=False)
    return errors

