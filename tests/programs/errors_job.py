"""Error paths between two ranks. usage: errors_job.py CASE"""
import os
import signal
import sys
import time

import numpy as np

import forestcc

case = sys.argv[1]
comm = forestcc.init()
r = comm.rank
buf = forestcc.zeros(1024, np.uint8)
ch = comm.connect(1 - r, buf, tag=0)

if case == "silent_peer":
    # Rank 1 never signals; rank 0's wait must time out naming rank 1 and the channel.
    if r == 0:
        try:
            ch.wait()
        except forestcc.TimeoutError as e:
            assert e.peer == 1 and e.rank == 0, (e.rank, e.peer)
            print("ERROR", e, flush=True)
    else:
        # Silent, but waiting: rank 0's timeout poisons the communicator, which wakes us.
        try:
            ch.wait(timeout=120)
        except forestcc.AbortedError as e:
            print("POISONED", e, flush=True)
elif case == "peer_dies":
    # Rank 1 dies by SIGKILL while rank 0 waits for it: rank 0 gets an error naming rank 1.
    if r == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        ch.wait()
    except forestcc.RemoteError as e:
        print("ERROR", e, flush=True)
elif case == "out_of_range":
    buf[:] = 7
    comm.barrier()
    if r == 0:
        for args in [(1020, 0, 8), (0, 1020, 8), (2**64 - 1, 0, 2), (0, 0, 1025)]:
            try:
                ch.put(*args)
                print("NO ERROR for", args)
            except ValueError as e:
                print("ERROR", e, flush=True)
        try:
            ch.get(0, 1000, 100)
        except ValueError as e:
            print("ERROR", e, flush=True)
        ch.signal()
    else:
        ch.wait()
        assert (buf == 7).all(), "a refused put wrote into the peer's memory"
        print("UNTOUCHED", flush=True)
elif case == "abort":
    # Rank 0 poisons the communicator; rank 1, waiting for a signal that never comes, wakes up.
    if r == 0:
        time.sleep(0.5)
        comm.abort("giving up on purpose")
        comm.send_bytes(1, b"x")
    else:
        try:
            ch.wait()
        except forestcc.AbortedError as e:
            print("ERROR", e, flush=True)
        comm.recv_bytes(0)
elif case == "bad_arguments":
    if r == 0:
        for f in [lambda: comm.connect(5, buf), lambda: comm.connect(0, np.zeros((4, 4))[:, 1]),
                  lambda: comm.register(np.zeros(4)[::2]),
                  lambda: comm.register(np.frombuffer(b"abcd", np.uint8)),
                  lambda: comm.register("not an array"), lambda: comm.connect(0, buf, tag=-1)]:
            try:
                f()
                print("NO ERROR")
            except (ValueError, TypeError) as e:
                print("ERROR", type(e).__name__, e, flush=True)
print(f"OK rank={r}", flush=True)
