"""A process that reaches another job's rank must be refused at once with "wrong magic", naming
the rank and address, never wait for its timeout nor be taken for a rank of that job.

usage: wrong_magic.py MODE
  before  rank 0 of a 2-rank job waits; an impostor (same address, another magic) joins as rank 1
  after   the same, once the job has finished its rendezvous (rank 0 is busy elsewhere); a second
          process of the job joining as rank 1 again is refused too, and the job still works
  peer    rank 0 of job A exits; job B's rank 0 takes its address; A's rank 1 sends to rank 0:
          B's rank 0 must refuse it (it would otherwise take it for B's rank 1 and hand B the
          impostor's message)
  member UID RANK SIZE   helper: joins (UID "new": creates the id, prints "UID <hex>"), prints
          "UP", then runs "send PEER TAG TEXT" / "recv PEER TAG" / "exit" read from stdin.
Prints "OK MODE" when every check passed.
"""
import os
import queue
import socket
import subprocess
import sys
import threading

import forestcc
from forestcc import _C

LINE_TIMEOUT = 120  # only turns a hang into a failure


def member(uid_arg, rank, size):
    if uid_arg == "new":
        uid = forestcc.unique_id()
        print("UID", bytes(uid).hex(), flush=True)
    else:
        uid = _C.UniqueId.from_bytes(bytes.fromhex(uid_arg))
    try:
        comm = forestcc.init(unique_id=uid, rank=rank, size=size)
    except Exception as e:  # noqa: BLE001 - reported to the driver, which judges it
        print("INIT-FAILED", type(e).__name__, e, flush=True)
        return
    print("UP", flush=True)
    for line in sys.stdin:
        cmd = line.split(maxsplit=3)
        try:
            if cmd[0] == "send":
                comm.send_bytes(int(cmd[1]), cmd[3].encode(), tag=int(cmd[2]))
                print("SENT", flush=True)
            elif cmd[0] == "recv":
                print("GOT", comm.recv_bytes(int(cmd[1]), tag=int(cmd[2])).decode(), flush=True)
            elif cmd[0] == "exit":
                return
        except Exception as e:  # noqa: BLE001
            print("REFUSED", type(e).__name__, e, flush=True)


class Proc:
    """A member process driven line by line."""

    def __init__(self, name, uid_hex, rank, size, timeout=60):
        self.name = name
        env = dict(os.environ, FORESTCC_TIMEOUT=str(timeout))
        self.p = subprocess.Popen(
            [sys.executable, __file__, "member", uid_hex, str(rank), str(size)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next(self):
        try:
            line = self.lines.get(timeout=LINE_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"{self.name}: no answer in {LINE_TIMEOUT} s (hang)") from None
        assert line is not None, f"{self.name} exited early"
        print(f"[{self.name}] {line}", flush=True)
        return line

    def do(self, command):
        self.p.stdin.write(command + "\n")
        self.p.stdin.flush()
        return self.next()

    def finish(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("exit\n")
                self.p.stdin.flush()
            except BrokenPipeError:
                pass
        rc = self.p.wait(timeout=LINE_TIMEOUT)
        assert rc == 0, f"{self.name} exited with {rc}"


def job(name, uid, size=2):
    procs = [Proc(f"{name}{r}", bytes(uid).hex(), r, size) for r in range(size)]
    for p in procs:
        assert p.next() == "UP"
    return procs


def free_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def other_job(uid):
    """The id a process of another job would hold: the same address, another magic."""
    return bytes(_C.UniqueId.from_address(uid.address, uid.magic ^ 0xDEAD)).hex()


def refused(line, *needles):
    assert line.startswith(("INIT-FAILED ValueError", "REFUSED ValueError")), line
    for n in needles:
        assert n in line, (n, line)


def before():
    uid = forestcc.unique_id()
    impostor = Proc("impostor", other_job(uid), 1, 2)
    try:
        forestcc.init(unique_id=uid, rank=0, size=2, timeout=5)
        raise AssertionError("rank 0 joined with an impostor")
    except forestcc.TimeoutError as e:
        assert "rank(s) 1 of 2 never connected" in str(e), e
    refused(impostor.next(), "wrong magic", f"rank 0 at {uid.address}")
    impostor.finish()


def after():
    uid = _C.UniqueId.from_address(free_address(), 0)
    b = job("B", uid)
    # Rank 0 has finished its rendezvous and waits on its stdin: something else must answer.
    impostor = Proc("impostor", other_job(uid), 1, 2, timeout=30)
    refused(impostor.next(), "wrong magic", f"rank 0 at {uid.address}")
    impostor.finish()
    again = Proc("again", bytes(uid).hex(), 1, 2, timeout=30)
    refused(again.next(), "another process already joined with this rank",
            f"rank 0 at {uid.address}")
    again.finish()
    assert b[1].do("send 0 5 from-B1") == "SENT"
    assert b[0].do("recv 1 5") == "GOT from-B1"
    for p in b:
        p.finish()


def peer():
    a0 = Proc("A0", "new", 0, 2)
    line = a0.next()
    assert line.startswith("UID "), line
    uid_a = _C.UniqueId.from_bytes(bytes.fromhex(line.split()[1]))
    a1 = Proc("A1", bytes(uid_a).hex(), 1, 2, timeout=30)
    assert a0.next() == "UP" and a1.next() == "UP"
    a0.finish()  # rank 0 of A is gone; its address is free again
    b = job("B", _C.UniqueId.from_address(uid_a.address, uid_a.magic ^ 0xBEEF))
    # A's rank 1 still has A's table: rank 0 is at uid_a.address, where B's rank 0 now listens.
    refused(a1.do("send 0 5 from-A1"), "wrong magic", uid_a.address, "rank 0")
    assert b[1].do("send 0 5 from-B1") == "SENT"
    assert b[0].do("recv 1 5") == "GOT from-B1"
    for p in [a1, *b]:
        p.finish()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "before"
    if mode == "member":
        member(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    {"before": before, "after": after, "peer": peer}[mode]()
    print("OK", mode, flush=True)
