"""Cases of the tcp transport (tests/test_tcp.py) that the collectives checker does not cover.
usage: tcp_check.py CASE
  p2p        send/recv between every pair over tcp: sizes 0 to several pieces, ordinary and
             forestcc memory, and a size mismatch (both sides raise, naming the other).
  mixed_env  rank 1 sets another FORESTCC_TRANSPORT than the others: init fails on every rank.
  channels   which transport each rank's channels report (auto: shm or cma on one node, tcp
             between nodes).
  fork       rank 0 forks a child after its communicator is made; the child exits normally
             (atexit handlers run) and the parent's communicator still works: a forked child
             says no goodbye for its parent's tcp peers.
"""
import os
import sys

import numpy as np

case = sys.argv[1]
if case == "mixed_env" and os.environ.get("FORESTCC_RANK") == "1":
    os.environ["FORESTCC_TRANSPORT"] = "shm,cma"

import forestcc  # noqa: E402

try:
    comm = forestcc.init()
except (forestcc.ForestccError, ValueError) as e:  # ValueError: a bad setting
    print("INIT", type(e).__name__, e, flush=True)
    sys.exit(0)
r, n = comm.rank, comm.size

if case == "p2p":
    rng = np.random.default_rng(5)
    for size in [0, 1, 4097, (1 << 20) + 3, (5 << 20) + 1]:
        for alloc in (np.zeros, forestcc.zeros):
            data = rng.integers(0, 1 << 30, size, dtype=np.int64)  # the same on every rank
            for src in range(n):
                for dst in range(n):
                    if src == dst:
                        continue
                    if r == src:
                        buf = alloc(size, np.int64)
                        buf[:] = data + src
                        comm.send(buf, dst)
                    elif r == dst:
                        out = alloc(size, np.int64)
                        comm.recv(out, src)
                        assert np.array_equal(out, data + src), (size, src, dst)
    comm.barrier()
    # A size mismatch: rank 0 sends 10 elements, rank 1 expects 11; both raise, naming the other.
    if r in (0, 1):
        try:
            if r == 0:
                comm.send(np.zeros(10, np.int32), 1)
            else:
                comm.recv(np.zeros(11, np.int32), 0)
            print("NO ERROR", flush=True)
        except ValueError as e:
            print("MISMATCH", e, flush=True)
    comm.barrier()
    print(f"OK rank={r}", flush=True)

elif case == "fork":
    x = np.arange(1000, dtype=np.float32) + r
    comm.all_reduce(x)
    if r == 0:
        pid = os.fork()
        if pid == 0:  # the child: a normal exit, so C atexit handlers run
            sys.exit(7)
        _, status = os.waitpid(pid, 0)
        print(f"CHILD exit={os.waitstatus_to_exitcode(status)}", flush=True)
    comm.barrier()
    for _ in range(3):
        x = np.arange(1000, dtype=np.float32) + r
        comm.all_reduce(x)
        assert np.array_equal(x, n * np.arange(1000, dtype=np.float32) + n * (n - 1) / 2), x[:4]
    comm.barrier()
    print(f"OK rank={r}", flush=True)

elif case == "channels":
    buf = np.zeros(16, np.uint8)
    peers = [p for p in range(n) if p != r]
    for p, ch in zip(peers, comm.connect(peers, buf, tag=9)):
        print(f"CHANNEL {r}->{p} {ch.transport}", flush=True)
    comm.barrier()
