"""forestcc-run: start N ranks of a program, here or across hosts, and supervise them.

Across hosts (`--hosts h1:2,h2:2` or `--hostfile`), ranks fill the hosts in order and start
through ssh (`--launcher ssh`) or inside an emulated cluster's hosts (`--launcher cluster`,
forestcc-cluster); launch_hosts.py places them, launch_starters.py starts them.

Each rank gets FORESTCC_RANK, FORESTCC_SIZE, FORESTCC_LOCAL_RANK, FORESTCC_LOCAL_SIZE,
FORESTCC_ROOT_ADDR and FORESTCC_JOB_ID; rank 0 also inherits the already-listening rendezvous
socket (FORESTCC_ROOT_FD), so no port can be stolen between choosing it and using it.
If a rank exits non-zero or is killed, the others are stopped (SIGTERM, then SIGKILL) and
forestcc-run exits non-zero naming the rank and how it ended. Ctrl-C stops every rank.

The ranks' stdout and stderr come back through pipes and are passed on one whole line at a time,
so lines of different ranks never cut into each other (writes from several processes straight
into one pipe or terminal do, as soon as a line takes more than one write).

Ranks die with forestcc-run, even when it is killed with SIGKILL: each rank asks the kernel for
SIGKILL when forestcc-run dies (PR_SET_PDEATHSIG), and a watchdog process, which sees forestcc-run
die as the end of a pipe, kills each rank's whole process group (what the rank started, too).
"""
from __future__ import annotations

import argparse
import ctypes
import math
import os
import resource
import secrets
import selectors
import signal
import subprocess
import sys
import threading
import time

from forestcc.launch_hosts import Placement, parse_hosts, place, read_hostfile
from forestcc.launch_starters import (SSH_DEFAULT, ClusterStarter, LocalStarter, SshStarter,
                                      starter_stdin)

__all__ = ["main"]

_POLL_SECONDS = 0.02
# Ranks on one machine: beyond this a job is a typo (-n 100000 would fork until the machine
# gives out), and forestcc-run's listen backlog is sized for it.
_MAX_RANKS = 1024
# A line longer than this is passed on in pieces of this size, each ended by a newline, so that
# a rank writing without newlines cannot make forestcc-run hold unbounded memory.
_MAX_LINE = 1 << 20
_PR_SET_PDEATHSIG = 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="forestcc-run",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Start N ranks of CMD with the forestcc rank environment, on this machine "
                    "or across hosts. Stops all ranks when one fails; exits non-zero naming the "
                    "failed rank (and its host). The ranks' output is passed on one whole line "
                    "at a time; the ranks die with forestcc-run, even when it is killed.",
        epilog="""examples:
  forestcc-run -n 4 --label python train.py
  forestcc-run --hosts node1:8,node2:8 --label python train.py          (ssh)
  forestcc-run --hostfile hosts.txt --root-addr 10.0.0.1 python train.py
  forestcc-run --cluster fcc3f9a1c --hosts h0:2,h1:2 python train.py     (forestcc-cluster)

across hosts each rank gets FORESTCC_RANK, FORESTCC_SIZE, FORESTCC_LOCAL_RANK and
FORESTCC_LOCAL_SIZE (its place on its host), FORESTCC_JOB_ID and FORESTCC_ROOT_ADDR=host:port of
rank 0. With ssh, rank 0 binds that port on its host (--port, default random in 20000-39999;
--root-addr when rank 0's host name does not resolve to an address the others reach), the
remote command runs in the same working directory when it exists there, and it gets the
FORESTCC_* variables and those of --env (the rest is the remote login's environment); a rank is
killed when its ssh connection ends. ssh must log in without a password (BatchMode).""")
    p.add_argument("-n", "--np", dest="n", type=int, default=None,
                   help=f"number of ranks (1 to {_MAX_RANKS}); with --hosts, at most the "
                        "hosts' slots (default: all of them)")
    hosts = p.add_argument_group("across hosts")
    where = hosts.add_mutually_exclusive_group()
    where.add_argument("--hosts", metavar="HOST[:SLOTS],...",
                       help="hosts and how many ranks each takes (default 1), filled in order: "
                            "rank 0 is on the first host")
    where.add_argument("--hostfile", metavar="FILE",
                       help="one host a line: HOST, HOST:SLOTS or HOST slots=SLOTS; # comments")
    hosts.add_argument("--launcher", choices=("ssh", "cluster"), default=None,
                       help="how ranks start on the hosts: ssh, or entering the hosts of an "
                            "emulated cluster (default: cluster when --cluster or "
                            "$FORESTCC_CLUSTER is set, else ssh)")
    hosts.add_argument("--cluster", metavar="ID", default=None,
                       help="the emulated cluster (forestcc-cluster) whose hosts --hosts names "
                            "(default $FORESTCC_CLUSTER)")
    hosts.add_argument("--ssh", metavar="CMD", default=None,
                       help="the ssh command line, HOST and the remote command are appended "
                            f"(default {SSH_DEFAULT!r})")
    hosts.add_argument("--root-addr", metavar="HOST", default=None,
                       help="with ssh: the address rank 0 listens on and the others connect to "
                            "(default: rank 0's host name as given)")
    hosts.add_argument("--port", type=int, default=None,
                       help="with ssh: the rendezvous port on rank 0's host (default random)")
    p.add_argument("-l", "--label", action="store_true",
                   help="prefix every output line with [rank] (lines are passed on whole "
                        "with or without it)")
    p.add_argument("--host", default="127.0.0.1",
                   help="on one machine: the address rank 0 listens on for the rendezvous "
                        "(default 127.0.0.1)")
    p.add_argument("--grace", type=float, default=5.0,
                   help="seconds (>= 0) between SIGTERM and SIGKILL when stopping ranks "
                        "(default 5)")
    p.add_argument("--bind", choices=("none", "core"), default="none",
                   help="core: rank r runs on CPU r of forestcc-run's CPUs (os.sched_getaffinity; "
                        "every rank on this machine, so not with ssh), all its threads included: "
                        "steadier small-message times, but a rank's own threads then share its "
                        "one CPU (no overlap of a queued call with the rank's work); "
                        "none (default): the scheduler places them")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="set an environment variable in every rank (repeatable; sent to "
                        "remote hosts too)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the program and its arguments")
    return p


def _describe(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"was killed by signal {-rc} ({name})"
    return f"exited with code {rc}"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _dead(pid: int) -> bool:
    """True once `pid` is gone or a zombie (a process we cannot wait for)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _watchdog(fd: int, launcher_pid: int, sweep) -> None:
    """Runs in a child of forestcc-run, in its own session (a signal to forestcc-run's process
    group spares it). Reads the ranks' pids from `fd`; "done" means forestcc-run has stopped them
    itself. End of file without "done" means forestcc-run died: kill every rank's process group
    and sweep the shared memory the killed ranks leave."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # stderr stays: the one message below goes there
    os.close(null)
    pids: list[int] = []
    buf = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line == b"done":
                return
            pids.append(int(line))
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)  # each rank leads its own session and group
        except OSError:
            pass
    try:
        os.write(2, f"forestcc-run: the launcher (pid {launcher_pid}) died; killed its "
                    f"{len(pids)} rank(s)\n".encode())
    except OSError:
        pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(_dead(p) for p in pids):
        time.sleep(0.05)
    sweep()


def _start_watchdog(sweep) -> tuple[int, int]:
    """Forks the watchdog (before any thread exists, so the fork is safe); returns its pid and
    the pipe's write end, which only forestcc-run holds (os.pipe fds are close-on-exec)."""
    r, w = os.pipe()
    launcher_pid = os.getpid()
    pid = os.fork()
    if pid == 0:  # the watchdog
        try:
            os.close(w)
            _watchdog(r, launcher_pid, sweep)
        finally:
            os._exit(0)
    os.close(r)
    return pid, w


def _die_with_launcher(launcher_pid: int, fd_limit: tuple[int, int]):
    """preexec_fn of each rank: SIGKILL when forestcc-run dies. Runs between fork and exec, while
    forestcc-run has a single thread (the relay thread starts after the last rank)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the watchdog still kills the ranks
        prctl = None

    def preexec() -> None:
        if resource.getrlimit(resource.RLIMIT_NOFILE) != fd_limit:
            resource.setrlimit(resource.RLIMIT_NOFILE, fd_limit)  # undo _raise_fd_limit
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # forestcc-run may have died before the line above: then nothing would send the signal.
        if os.getppid() != launcher_pid:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def _bound(preexec, cpu: int):
    """preexec_fn of a rank bound to `cpu` (--bind core): its threads, later ones included, run there."""
    def run() -> None:
        preexec()
        os.sched_setaffinity(0, {cpu})

    return run


def _cpus_to_bind(parser: argparse.ArgumentParser, args: argparse.Namespace, placements, starter
                  ) -> list[int] | None:
    """--bind core: the CPU of each rank (by rank), from forestcc-run's own; None for --bind none."""
    if args.bind == "none":
        return None
    if starter.remote:
        parser.error("--bind core binds ranks on this machine; with ssh the ranks run elsewhere")
    cpus = sorted(os.sched_getaffinity(0))
    if len(placements) > len(cpus):
        parser.error(f"--bind core: {len(placements)} ranks on this machine but forestcc-run may use "
                     f"only {len(cpus)} CPUs ({', '.join(map(str, cpus))}); use fewer ranks or "
                     "--bind none")
    return cpus[:len(placements)]


def _raise_fd_limit(n: int) -> tuple[int, int]:
    """forestcc-run holds two pipes per rank; make room for them. Returns the limit as it was,
    which the ranks get back."""
    need = 2 * n + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise SystemExit(f"forestcc-run: -n {n} needs {need} open files, but the limit is "
                             f"{hard} (ulimit -Hn)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return soft, hard


class _Job:
    def __init__(self, args: argparse.Namespace, placements: list[Placement], starter,
                 bound_cpus: list[int] | None = None):
        self.args = args
        self.placements = placements
        self.starter = starter
        self.bound_cpus = bound_cpus  # --bind core: each rank's CPU, by rank
        self.procs: list[subprocess.Popen] = []
        self.relay: threading.Thread | None = None
        self.out_lock = threading.Lock()
        self.broken: set[int] = set()  # sink fds that can no longer be written
        self.watchdog_pid = 0
        self.watchdog_fd = -1
        self.shm_prefix: str | None = None
        self.interrupted: list[int] = []  # SIGINT / SIGTERM received, in order

    def catch_signals(self) -> None:
        """Ctrl-C and SIGTERM stop the job (supervise): caught from before the first rank starts,
        so that one arriving while the ranks start, before supervise runs, is not Python's
        KeyboardInterrupt (forestcc-run then died of the signal instead of stopping the ranks and
        exiting 130; seen in CI on a loaded machine)."""
        def on_signal(signum, _frame):
            if self.interrupted:  # a second Ctrl-C: no more patience
                self.signal_all(signal.SIGKILL)
            self.interrupted.append(signum)

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)

    def say(self, msg: str) -> None:
        """A message of forestcc-run's own, never inside a relayed line."""
        self._emit(2, f"forestcc-run: {msg}\n".encode())

    def _emit(self, fd: int, data: bytes) -> None:
        with self.out_lock:
            if fd in self.broken:
                return
            try:
                _write_all(fd, data)
            except OSError as exc:
                # Keep reading the ranks (they would block on a full pipe), but say so once.
                self.broken.add(fd)
                name = "stdout" if fd == 1 else "stderr"
                if fd != 2 and 2 not in self.broken:
                    try:
                        _write_all(2, f"forestcc-run: cannot write to {name} "
                                      f"({exc.strerror}); dropping the ranks' {name}\n".encode())
                    except OSError:
                        self.broken.add(2)

    def start(self) -> None:
        a = self.args
        job_id = secrets.token_hex(8)
        base = dict(os.environ)
        for item in a.env:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise SystemExit(f"forestcc-run: --env expects NAME=VALUE, got {item!r}")
            base[name] = value
        self.shm_prefix = base.get("FORESTCC_SHM_PREFIX")
        n = len(self.placements)
        fd_limit = _raise_fd_limit(n)
        self.watchdog_pid, self.watchdog_fd = _start_watchdog(self.sweep)
        try:
            listener, root_addr = self.starter.listen(self.placements[0].host)
        except OSError as exc:
            self.close_watchdog()
            raise SystemExit(f"forestcc-run: cannot listen for the rendezvous on "
                             f"{self.placements[0].host or a.host}: {exc.strerror}") from None
        preexec = _die_with_launcher(os.getpid(), fd_limit)
        cpus = self.bound_cpus
        forwarded = {item.partition("=")[0] for item in a.env}
        for pl in self.placements:
            env = dict(base)
            env.update(FORESTCC_RANK=str(pl.rank), FORESTCC_SIZE=str(n),
                       FORESTCC_LOCAL_RANK=str(pl.local_rank),
                       FORESTCC_LOCAL_SIZE=str(pl.local_size),
                       FORESTCC_ROOT_ADDR=root_addr, FORESTCC_JOB_ID=job_id)
            pass_fds: tuple[int, ...] = ()
            if pl.rank == 0 and listener is not None:
                env["FORESTCC_ROOT_FD"] = str(listener.fileno())
                pass_fds = (listener.fileno(),)
            argv, env = self.starter.command(pl.host, a.cmd, env, forwarded)
            try:
                proc = subprocess.Popen(argv, env=env, pass_fds=pass_fds, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, stdin=starter_stdin(self.starter),
                                        start_new_session=True,
                                        preexec_fn=_bound(preexec, cpus[pl.rank]) if cpus else preexec)
            except (OSError, subprocess.SubprocessError) as exc:
                self.stop(signal.SIGKILL)
                self.close_watchdog()
                why = exc.strerror if isinstance(exc, OSError) else str(exc)
                raise SystemExit(f"forestcc-run: cannot start {argv[0]!r}: {why}") from None
            self.procs.append(proc)
            self._tell_watchdog(f"{proc.pid}\n")
        if listener is not None:
            listener.close()  # rank 0 holds its own copy
        # One thread relays every rank's output, started only now: a rank forked while another
        # thread runs could inherit a lock that thread held.
        self.relay = threading.Thread(target=self._relay_all, daemon=True)
        self.relay.start()

    def _relay_all(self) -> None:
        """Passes each rank's output on whole lines at a time, in one write per batch of lines."""
        sel = selectors.DefaultSelector()
        for rank, proc in enumerate(self.procs):
            for stream, sink in ((proc.stdout, 1), (proc.stderr, 2)):
                sel.register(stream.fileno(), selectors.EVENT_READ, (rank, sink))
        prefixes = [f"[{r}] ".encode() if self.args.label else b"" for r in range(len(self.procs))]
        pending: dict[int, bytes] = {}
        while sel.get_map():
            for key, _ in sel.select():
                rank, sink = key.data
                try:
                    data = os.read(key.fd, 1 << 16)
                except OSError:
                    data = b""
                buf = pending.pop(key.fd, b"") + data
                if not data:  # end of file: a last line without newline still gets out
                    sel.unregister(key.fd)
                    cut = len(buf)
                else:
                    cut = buf.rfind(b"\n") + 1
                    if cut == 0 and len(buf) >= _MAX_LINE:
                        cut = len(buf)
                if cut < len(buf):
                    pending[key.fd] = buf[cut:]
                if cut:
                    lines = buf[:cut] if buf[cut - 1] == 10 else buf[:cut] + b"\n"
                    p = prefixes[rank]
                    if p:
                        lines = p + lines[:-1].replace(b"\n", b"\n" + p) + b"\n"
                    self._emit(sink, lines)
        sel.close()

    def sweep(self) -> None:
        """Removes the shared-memory segments of dead ranks, on every host that had ranks."""
        self.starter.sweep(sorted({pl.host for pl in self.placements}), self.shm_prefix)

    def _who(self, rank: int) -> str:
        host = self.placements[rank].host
        return f"rank {rank} on {host}" if host else f"rank {rank}"

    def signal_all(self, sig: int) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, sig)  # the rank and anything it started
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self, first: int = signal.SIGTERM) -> None:
        """Ask every rank to stop, then kill what is left after the grace period."""
        self.signal_all(first)
        deadline = time.monotonic() + self.args.grace
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
            time.sleep(_POLL_SECONDS)
        self.signal_all(signal.SIGKILL)
        for p in self.procs:
            p.wait()

    def supervise(self) -> int:
        """Wait for the ranks; returns forestcc-run's exit code."""
        while True:
            if self.interrupted:
                sig = self.interrupted[0]
                self.say(f"received {signal.Signals(sig).name}; stopping all ranks")
                self.stop(signal.SIGINT if sig == signal.SIGINT else signal.SIGTERM)
                return 128 + sig
            # One look at every rank, and every decision below from it: a rank that ends
            # between two looks must not be seen running by the first and finished by the second
            # (its failure would go unseen and the job exit 0).
            codes = [p.poll() for p in self.procs]
            failed = [(r, rc) for r, rc in enumerate(codes) if rc is not None and rc != 0]
            if failed:
                # A rank killed by a signal first: the others that ended by then most often
                # exited because of it (they raise naming the dead peer), and it is the cause.
                rank, rc = min(failed, key=lambda f: (f[1] > 0, f[0]))
                running = [r for r, p in enumerate(self.procs) if p.poll() is None]
                self.say(f"{self._who(rank)} (pid {self.procs[rank].pid}) {_describe(rc)}")
                if running:
                    self.say(f"stopping rank(s) {', '.join(map(str, running))}")
                self.stop()
                return rc if rc > 0 else 128 - rc
            if all(rc is not None for rc in codes):
                self.signal_all(signal.SIGKILL)  # stray grandchildren of finished ranks
                return 0
            time.sleep(_POLL_SECONDS)

    def finish(self) -> None:
        """After every rank was reaped: drain their output, sweep the segments of ranks that died
        by SIGKILL, and let the watchdog go."""
        if any(p.poll() is None for p in self.procs):  # supervise() did not finish
            self.signal_all(signal.SIGKILL)
            for p in self.procs:
                p.wait()
        if self.relay is not None:
            # Bounded: a process that left the ranks' process groups may hold a pipe for ever.
            self.relay.join(timeout=10)
            if self.relay.is_alive():
                self.say("a process started by a rank still holds the ranks' output open; "
                         "not waiting for it")
        self.sweep()
        self.close_watchdog()

    def _tell_watchdog(self, line: str) -> None:
        try:
            _write_all(self.watchdog_fd, line.encode())
        except OSError:  # it is gone; each rank's PR_SET_PDEATHSIG remains
            pass

    def close_watchdog(self) -> None:
        if self.watchdog_fd < 0:
            return
        self._tell_watchdog("done\n")
        os.close(self.watchdog_fd)
        self.watchdog_fd = -1
        os.waitpid(self.watchdog_pid, 0)


def _plan(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """The ranks' placements and the starter that starts them, from the command line."""
    if args.hosts is None and args.hostfile is None:
        remote_only = [f"--{name.replace('_', '-')}" for name in
                       ("launcher", "cluster", "ssh", "root_addr", "port")
                       if getattr(args, name) is not None]
        if remote_only:
            parser.error(f"{', '.join(remote_only)} need --hosts or --hostfile")
        if args.n is None:
            parser.error("give the number of ranks (-n) or the hosts (--hosts, --hostfile)")
        if not 1 <= args.n <= _MAX_RANKS:
            parser.error(f"-n must be between 1 and {_MAX_RANKS} (ranks on this machine), "
                         f"got {args.n}")
        return [Placement(r, "", r, args.n) for r in range(args.n)], LocalStarter(args.host)
    try:
        hosts = parse_hosts(args.hosts) if args.hosts is not None else read_hostfile(args.hostfile)
        placements = place(hosts, args.n)
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    if len(placements) > _MAX_RANKS:
        parser.error(f"at most {_MAX_RANKS} ranks, got {len(placements)}")
    cluster = args.cluster or os.environ.get("FORESTCC_CLUSTER")
    launcher = args.launcher or ("cluster" if cluster else "ssh")
    if launcher == "cluster":
        if not cluster:
            parser.error("--launcher cluster needs --cluster ID (or $FORESTCC_CLUSTER)")
        from forestcc.cluster import ClusterError
        try:
            starter = ClusterStarter(cluster)
            for name in {pl.host for pl in placements}:
                starter.cluster.host(name)
        except ClusterError as exc:
            raise SystemExit(f"forestcc-run: {exc}") from None
        return placements, starter
    if args.port is not None and not 1 <= args.port <= 65535:
        parser.error(f"--port must be between 1 and 65535, got {args.port}")
    return placements, SshStarter(args.ssh or SSH_DEFAULT, args.root_addr, args.port)


def main(argv: list[str] | None = None) -> None:
    """forestcc-run's entry point: parses `argv` (default sys.argv[1:]), runs the job, exits."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.cmd and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    if not args.cmd:
        parser.error("no command given")
    placements, starter = _plan(parser, args)
    bound_cpus = _cpus_to_bind(parser, args, placements, starter)
    if not (math.isfinite(args.grace) and args.grace >= 0):
        parser.error(f"--grace must be a number of seconds >= 0, got {args.grace:g}")
    job = _Job(args, placements, starter, bound_cpus)
    job.catch_signals()
    job.start()
    try:
        code = job.supervise()
    finally:
        job.finish()
    sys.exit(code)


if __name__ == "__main__":
    main()
