"""Faults across hosts (tests/test_multinode.py). usage: multinode_faults.py CASE
  kill  all_reduce in a loop; the last rank kills itself at call 20: every other rank must raise
        an error naming it, and exit 3.
  cut   all_reduce in a loop until it fails (the test cuts a host's link): print the error, exit 3.
  leave rank 0 exits right after an all_reduce without destroying its communicator; the others
        carry on: they wait until rank 0's host-to-host link says it left, exchange with each other
        (print HEALTHY), then a put to rank 0 (its flush) and a recv from it must each fail at once
        naming it (print ERROR), not wait for their deadline.
"""
import os
import signal
import sys
import time

import numpy as np

import forestcc

case = sys.argv[1]
comm = forestcc.init()
r, n = comm.rank, comm.size
x = np.ones(1 << 16, np.float32)
print(f"READY rank={r}", flush=True)
if case == "leave":
    comm.all_reduce(x)
    far = [p for p in range(n) if comm.node_of(p) != comm.node_of(0)]  # behind tcp from rank 0
    elsewhere = r in far  # rank 0's exit is seen here
    big = forestcc.empty(32 << 20, dtype=np.uint8)  # more than the sockets hold
    rest = comm.split(None if r == 0 else 0)  # the others' barrier once rank 0 is gone
    if r == 0:
        comm.connect(far, big)
        sys.exit(0)  # no destroy: the process's exit says goodbye
    channel = comm.connect(0, big) if elsewhere else None
    deadline = time.monotonic() + 600  # only there to turn a hang into a failure
    while elsewhere and not comm.peer_left(0):
        comm._native.check_healthy()  # raises if rank 0's exit was taken for a death
        assert time.monotonic() < deadline, "rank 0 never left"
        time.sleep(0.01)
    survivors = list(range(1, n))
    i = survivors.index(r)
    y = np.full(1 << 12, r, np.float32)
    got = np.empty_like(y)
    work = comm.send(y, survivors[(i + 1) % len(survivors)], async_op=True)
    comm.recv(got, survivors[i - 1])
    work.wait()
    assert got[0] == survivors[i - 1], got[0]
    comm._native.check_healthy()
    print(f"HEALTHY rank={r}", flush=True)
    rest.all_reduce(np.ones(1, np.float32))  # every one is healthy before any poisons comm below
    if elsewhere:
        try:  # a put to it cannot complete: its flush fails at once
            channel.put(0, 0, big.nbytes)
            channel.flush()
            print(f"FLUSHED rank={r}", flush=True)
        except forestcc.ForestccError as e:
            print(f"ERROR rank={r} {type(e).__name__} peer={e.peer}: {e}", flush=True)
        try:
            comm.recv(got, 0)
        except forestcc.ForestccError as e:
            print(f"ERROR rank={r} {type(e).__name__} peer={e.peer}: {e}", flush=True)
    sys.exit(0)
try:
    for i in range(10 ** 9):
        if case == "kill" and i == 20 and r == n - 1:
            os.kill(os.getpid(), signal.SIGKILL)
        x[:] = 1
        comm.all_reduce(x)
        assert x[0] == n, x[0]
except forestcc.ForestccError as e:
    print(f"ERROR rank={r} {type(e).__name__} peer={e.peer}: {e}", flush=True)
    sys.exit(3)
