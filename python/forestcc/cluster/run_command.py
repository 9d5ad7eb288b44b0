"""`forestcc-cluster run`: make a cluster, run one command on it, take it down whatever happens.

The command is forestcc-run over every host (R ranks per host), or with --outside the command
itself, once, on this machine with FORESTCC_CLUSTER set (an mpirun with the rsh agent, a script
calling `forestcc-cluster exec`). It runs in its own session, so a Ctrl-C reaches it once, through
us: the first SIGINT or SIGTERM is passed on (forestcc-run then stops its ranks), a second one
too (forestcc-run then kills them). The cluster is taken down after the command ends, with
further signals ignored meanwhile; if this process is killed outright, the cluster is a leftover
that the next cluster made on the machine, or `forestcc-cluster clean`, takes down."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

from .cluster import Cluster
from .shaping import Shaping

__all__ = ["run_on_cluster", "parse_cut"]

_PR_SET_PDEATHSIG = 1


def parse_cut(text: str) -> tuple[str, float]:
    """"h1@3.5" -> ("h1", 3.5): cut h1's link 3.5 s after the command starts."""
    host, sep, when = text.rpartition("@")
    try:
        seconds = float(when)
    except ValueError:
        seconds = -1.0
    if not sep or not host or not seconds >= 0:
        raise ValueError(f"--cut takes HOST@SECONDS (e.g. h1@3.5), got {text!r}")
    return host, seconds


def _die_with_parent() -> None:
    """preexec_fn: the command gets SIGTERM if forestcc-cluster dies (it then stops its ranks)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _say(msg: str) -> None:
    print(f"forestcc-cluster: {msg}", file=sys.stderr, flush=True)


def _cut(c: Cluster, host: str, seconds: float) -> None:
    c.cut(host)
    _say(f"cut the link of {c.host(host).name} at {seconds:g} s")


def run_on_cluster(hosts: int, ranks_per_host: int | None, cmd: list[str], *,
                   shaping: Shaping | None, cuts: list[tuple[str, float]],
                   launcher_args: list[str], prefix: str, verbose: bool) -> int:
    """Returns the command's exit code (128 + signal when it was killed by one)."""
    interrupted: list[int] = []
    child: list[subprocess.Popen] = []

    def on_signal(signum, _frame):
        interrupted.append(signum)
        if child:
            try:
                os.killpg(child[0].pid, signum)
            except OSError:
                pass
        else:  # still making the cluster: stop that (create takes down what it made)
            raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    c = None
    try:
        c = Cluster.create(hosts, shaping=shaping, prefix=prefix)
        for h, _ in cuts:
            c.host(h)  # an unknown host is an error before the command starts
        if verbose:
            _say(f"cluster {c.id}: " + ", ".join(f"{h.name}={h.address}" for h in c.hosts))
        argv = list(cmd) if ranks_per_host is None else c.launcher_argv(ranks_per_host, cmd,
                                                                        tuple(launcher_args))
        env = dict(os.environ, FORESTCC_CLUSTER=c.id)
        start = time.monotonic()
        child.append(subprocess.Popen(argv, env=env, start_new_session=True,
                                      preexec_fn=_die_with_parent))
        timers = [threading.Timer(s, _cut, (c, h, s)) for h, s in cuts]
        for t in timers:
            t.daemon = True
            t.start()
        try:
            while True:
                try:
                    rc = child[0].wait()
                    break
                except KeyboardInterrupt:  # pragma: no cover - the handler does not raise now
                    continue
        finally:
            for t in timers:
                t.cancel()
        if verbose:
            _say(f"command ended after {time.monotonic() - start:.1f} s with {rc}")
        return rc if rc >= 0 else 128 - rc
    except KeyboardInterrupt:
        return 128 + (interrupted[0] if interrupted else signal.SIGINT)
    finally:
        for s in old:
            signal.signal(s, signal.SIG_IGN)  # taking down must not be cut short
        if child and child[0].poll() is None:
            child[0].kill()
            child[0].wait()
        if c is not None:
            c.destroy()
        for s, h in old.items():
            signal.signal(s, h)
