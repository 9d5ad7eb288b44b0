"""forestcc-run: start N local ranks of a program and supervise them.

Each rank gets FORESTCC_RANK, FORESTCC_SIZE, FORESTCC_LOCAL_RANK, FORESTCC_LOCAL_SIZE,
FORESTCC_ROOT_ADDR and FORESTCC_JOB_ID; rank 0 also inherits the already-listening rendezvous
socket (FORESTCC_ROOT_FD), so no port can be stolen between choosing it and using it.
If a rank exits non-zero or is killed, the others are stopped (SIGTERM, then SIGKILL) and
forestcc-run exits non-zero naming the rank and how it ended. Ctrl-C stops every rank.
"""
from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = ["main"]

_POLL_SECONDS = 0.02


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="forestcc-run",
        description="Start N local ranks of CMD with the forestcc rank environment. "
                    "Stops all ranks when one fails; exits non-zero naming the failed rank.",
        epilog="example: forestcc-run -n 4 --label python train.py")
    p.add_argument("-n", "--np", dest="n", type=int, required=True, help="number of ranks (>= 1)")
    p.add_argument("-l", "--label", action="store_true",
                   help="prefix every output line with [rank]")
    p.add_argument("--host", default="127.0.0.1",
                   help="address rank 0 listens on for the rendezvous (default 127.0.0.1)")
    p.add_argument("--grace", type=float, default=5.0,
                   help="seconds between SIGTERM and SIGKILL when stopping ranks (default 5)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="set an environment variable in every rank (repeatable)")
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


class _Job:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.procs: list[subprocess.Popen] = []
        self.threads: list[threading.Thread] = []
        self.out_lock = threading.Lock()

    def start(self) -> None:
        a = self.args
        listener = socket.socket(socket.AF_INET6 if ":" in a.host else socket.AF_INET)
        listener.bind((a.host, 0))
        listener.listen(1024)
        port = listener.getsockname()[1]
        host = f"[{a.host}]" if ":" in a.host else a.host
        job_id = secrets.token_hex(8)
        base = dict(os.environ)
        for item in a.env:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise SystemExit(f"forestcc-run: --env expects NAME=VALUE, got {item!r}")
            base[name] = value
        for rank in range(a.n):
            env = dict(base)
            env.update(FORESTCC_RANK=str(rank), FORESTCC_SIZE=str(a.n),
                       FORESTCC_LOCAL_RANK=str(rank), FORESTCC_LOCAL_SIZE=str(a.n),
                       FORESTCC_ROOT_ADDR=f"{host}:{port}", FORESTCC_JOB_ID=job_id)
            pass_fds: tuple[int, ...] = ()
            if rank == 0:
                env["FORESTCC_ROOT_FD"] = str(listener.fileno())
                pass_fds = (listener.fileno(),)
            pipe = subprocess.PIPE if a.label else None
            try:
                proc = subprocess.Popen(a.cmd, env=env, pass_fds=pass_fds, stdout=pipe,
                                        stderr=pipe, start_new_session=True)
            except OSError as exc:
                self.stop(signal.SIGKILL)
                raise SystemExit(f"forestcc-run: cannot start {a.cmd[0]!r}: {exc.strerror}") \
                    from None
            self.procs.append(proc)
            if a.label:
                for stream, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
                    t = threading.Thread(target=self._relay, args=(rank, stream, sink), daemon=True)
                    t.start()
                    self.threads.append(t)
        listener.close()  # rank 0 holds its own copy

    def _relay(self, rank: int, stream, sink) -> None:
        prefix = f"[{rank}] ".encode()
        for line in iter(stream.readline, b""):
            with self.out_lock:
                sink.buffer.write(prefix + line)
                sink.flush()
        stream.close()

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
        interrupted = []

        def on_signal(signum, _frame):
            if interrupted:  # a second Ctrl-C: no more patience
                self.signal_all(signal.SIGKILL)
            interrupted.append(signum)

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        while True:
            if interrupted:
                sig = interrupted[0]
                print(f"forestcc-run: received {signal.Signals(sig).name}; stopping all ranks",
                      file=sys.stderr)
                self.stop(signal.SIGINT if sig == signal.SIGINT else signal.SIGTERM)
                return 128 + sig
            failed = [(r, p.returncode) for r, p in enumerate(self.procs)
                      if p.poll() is not None and p.returncode != 0]
            if failed:
                rank, rc = failed[0]
                running = [r for r, p in enumerate(self.procs) if p.poll() is None]
                print(f"forestcc-run: rank {rank} (pid {self.procs[rank].pid}) {_describe(rc)}",
                      file=sys.stderr)
                if running:
                    print(f"forestcc-run: stopping rank(s) {', '.join(map(str, running))}",
                          file=sys.stderr)
                self.stop()
                return rc if rc > 0 else 128 - rc
            if all(p.poll() is not None for p in self.procs):
                self.signal_all(signal.SIGKILL)  # stray grandchildren of finished ranks
                return 0
            time.sleep(_POLL_SECONDS)

    def finish(self) -> None:
        for t in self.threads:
            t.join(timeout=5)
        try:  # segments of ranks that died by SIGKILL
            from forestcc import _C
            _C.sweep_stale_shared_memory()
        except ImportError:
            pass


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.cmd and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    if not args.cmd:
        _parser().error("no command given")
    if args.n < 1:
        _parser().error(f"-n must be at least 1, got {args.n}")
    job = _Job(args)
    job.start()
    try:
        code = job.supervise()
    finally:
        job.finish()
    sys.exit(code)


if __name__ == "__main__":
    main()
