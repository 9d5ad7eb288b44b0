"""How forestcc-run starts a rank on a host, and where rank 0 listens for the rendezvous.

- LocalStarter: every rank on this machine (forestcc-run -n N).
- ClusterStarter: hosts of an emulated cluster (forestcc-cluster): the rank enters its host's
  namespaces with nsenter, which execs (the rank keeps the pid forestcc-run started, so stopping
  and killing it work as on one machine). Rank 0's listening socket is made by forestcc-run inside
  rank 0's host and inherited, so no port can be taken between choosing and using it.
- SshStarter: real machines over ssh. The rank's environment travels in the remote command line;
  rank 0 binds the rendezvous port on its host itself (a port on another machine cannot be
  reserved from here). The remote command watches its stdin, which forestcc-run holds open: when
  forestcc-run or ssh dies, the rank (and its process group) is killed, because sshd without a
  terminal does not signal a command whose connection is gone.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import sys

__all__ = ["SSH_DEFAULT", "ClusterStarter", "LocalStarter", "SshStarter", "remote_command",
           "starter_stdin", "sweep_segments"]

_CLONE_NEWNET = 0x40000000
SSH_DEFAULT = "ssh -T -o BatchMode=yes"
# Variables sent to remote ranks besides the rank's own: forestcc's configuration.
_FORWARDED_PREFIX = "FORESTCC_"
# Runs on the remote host as `sh -c GUARD forestcc-rank CMD ARGS...`. It starts the rank in a
# session of its own (when setsid exists) and a watcher in another that kills the rank's session
# once stdin (the ssh channel, held open by forestcc-run) ends: sshd signals nothing to a command
# whose connection is gone, so without it ranks would outlive a killed forestcc-run. (Each kill
# names one target: dash's kill takes no `--`, and a negative pid is a process group.) TERM, INT
# and HUP to the guard go on to the rank; the guard exits with the rank's status.
_GUARD = """\
exec 3<&0
s=; if command -v setsid >/dev/null 2>&1; then s=setsid; fi
$s "$@" </dev/null & rank=$!
$s sh -c 'cat >/dev/null; for g in TERM KILL; do kill -$g -$0; kill -$g $0; sleep 5; done' \
  $rank <&3 >/dev/null 2>&1 & watch=$!
trap 'kill -TERM -$rank 2>/dev/null; kill -TERM $rank 2>/dev/null' TERM INT HUP
wait $rank; rc=$?
while kill -0 $rank 2>/dev/null; do wait $rank; rc=$?; done
kill -$watch 2>/dev/null; kill $watch 2>/dev/null
exit $rc"""


def sweep_segments(prefix: str | None) -> None:
    """Unlink shared-memory segments of dead processes, named with the ranks' prefix (theirs, not
    necessarily this process's: --env FORESTCC_SHM_PREFIX=... sets it for the ranks only)."""
    if prefix is not None:
        os.environ["FORESTCC_SHM_PREFIX"] = prefix  # what the native sweep reads
    try:
        from forestcc import _C
        _C.sweep_stale_shared_memory()
    except ImportError:
        pass


def _listen(host: str, port: int = 0) -> tuple[socket.socket, str]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family)
    s.bind((host, port))
    s.listen(1024)
    bracketed = f"[{host}]" if ":" in host else host
    return s, f"{bracketed}:{s.getsockname()[1]}"


class LocalStarter:
    """Every rank here; rank 0 inherits a socket listening on `bind_host`."""
    remote = False

    def __init__(self, bind_host: str):
        self.bind_host = bind_host

    def listen(self, host: str | None) -> tuple[socket.socket | None, str]:
        return _listen(self.bind_host)

    def command(self, host, cmd: list[str], env: dict[str, str], forwarded: set[str]
                ) -> tuple[list[str], dict]:
        """argv and environment of the local process that is (or starts) the rank."""
        return list(cmd), env

    def sweep(self, hosts: list[str], shm_prefix: str | None) -> None:
        sweep_segments(shm_prefix)


@contextlib.contextmanager
def _in_netns(path: str):
    """This thread in another network namespace for the block (needs CAP_SYS_ADMIN)."""
    setns = ctypes.CDLL(None, use_errno=True).setns
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(path, os.O_RDONLY)
    try:
        if setns(target, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"cannot enter {path}: {os.strerror(err)}")
        try:
            yield
        finally:
            if setns(own, _CLONE_NEWNET) != 0:  # never go on in the wrong namespace
                os.abort()
    finally:
        os.close(own)
        os.close(target)


class ClusterStarter:
    """Hosts of the emulated cluster `cluster_id` (names h0, h1, ... or their addresses)."""
    remote = False

    def __init__(self, cluster_id: str):
        from forestcc.cluster import Cluster  # only multi-host runs need it
        self.cluster = Cluster.attach(cluster_id)

    def listen(self, host: str) -> tuple[socket.socket, str]:
        h = self.cluster.host(host)
        with _in_netns(h.netns_path):
            return _listen(h.address)

    def command(self, host: str, cmd: list[str], env: dict[str, str], forwarded: set[str]
                ) -> tuple[list[str], dict]:
        return self.cluster.host(host).enter_argv() + list(cmd), env

    def sweep(self, hosts: list[str], shm_prefix: str | None) -> None:
        """Each host has a /dev/shm of its own: sweep inside each (bounded: a stuck sweep must
        not hold forestcc-run)."""
        env = dict(os.environ)
        if shm_prefix is not None:
            env["FORESTCC_SHM_PREFIX"] = shm_prefix
        code = "from forestcc import _C; _C.sweep_stale_shared_memory()"
        for host in hosts:
            try:
                subprocess.run(self.cluster.host(host).enter_argv() + [sys.executable, "-c", code],
                               env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               timeout=60, check=False)
            except (OSError, subprocess.SubprocessError):
                pass


def remote_command(cmd: list[str], env: dict[str, str], cwd: str | None) -> str:
    """The command line a remote shell runs for one rank (what ssh sends)."""
    assignments = [shlex.quote(f"{k}={v}") for k, v in sorted(env.items())]
    parts = []
    if cwd:
        parts.append(f"cd {shlex.quote(cwd)} 2>/dev/null;")  # same path there, when it exists
    parts += ["exec", "env", *assignments, "sh", "-c", shlex.quote(_GUARD), "forestcc-rank",
              *map(shlex.quote, cmd)]
    return " ".join(parts)


class SshStarter:
    """Real hosts through ssh (`ssh_command` is split like a shell would). Rank 0 binds
    `root_addr` (host:port) itself; by default its host's name and a random port."""
    remote = True

    def __init__(self, ssh_command: str, root_host: str | None, port: int | None):
        self.ssh = shlex.split(ssh_command)
        if not self.ssh or shutil.which(self.ssh[0]) is None:
            missing = self.ssh[0] if self.ssh else "ssh"
            raise SystemExit(f"forestcc-run: --launcher ssh needs {missing!r} on PATH and it is "
                             "not there (install openssh-client, or give another command with "
                             "--ssh)")
        self.root_host = root_host
        self.port = port or 20000 + secrets.randbelow(20000)

    def listen(self, host: str) -> tuple[None, str]:
        h = self.root_host or host
        return None, f"[{h}]:{self.port}" if ":" in h else f"{h}:{self.port}"

    def command(self, host: str, cmd: list[str], env: dict[str, str], forwarded: set[str]
                ) -> tuple[list[str], dict]:
        """Sends forestcc's variables and those of --env; the rest is the remote login's."""
        sent = {k: v for k, v in env.items() if k.startswith(_FORWARDED_PREFIX) or k in forwarded}
        return [*self.ssh, host, remote_command(cmd, sent, os.getcwd())], dict(os.environ)

    def sweep(self, hosts: list[str], shm_prefix: str | None) -> None:
        """Nothing: a remote sweep would need another login per host. The next forestcc process
        on that host to make a segment sweeps those of dead processes of its prefix."""


def starter_stdin(starter) -> int | None:
    """What a rank's stdin is: for ssh, a pipe forestcc-run keeps open (its end is the rank's
    life line); otherwise inherited."""
    return subprocess.PIPE if starter.remote else None
