"""Rank 0 drops a split communicator (its process stays alive) while the other ranks still call
on it: their waits on rank 0 must raise at once, naming rank 0 as having left, not at
FORESTCC_TIMEOUT (the test sets it long enough that a timeout's message, not its time, tells).

argv[1], what the others do on the split communicator:
  after    an all_reduce, entered once rank 0 has dropped it
  waiting  an async all_reduce entered before rank 0 drops it (its wait is under way)
  recv     a recv from rank 0, once rank 0 has dropped it
Prints "RAISED <rank> <error type>: <message>" or "RETURNED <rank>" on ranks 1.., "DONE <rank>"
on all (rank 0 stays until every other rank has reported)."""
import gc
import sys

import numpy as np

import forestcc

mode = sys.argv[1]
world = forestcc.init()
sub = world.split(0)
r, n = world.rank, world.size
if r == 0:
    if mode == "waiting":
        for p in range(1, n):
            assert world.recv_bytes(p) == b"entered"
    del sub
    gc.collect()
    for p in range(1, n):
        world.send_bytes(p, b"left")
    for p in range(1, n):  # alive until each has seen it: a dead rank 0 would be another error
        assert world.recv_bytes(p) == b"seen"
else:
    x = np.ones(1024, np.float32)
    try:
        if mode == "waiting":
            work = sub.all_reduce(x, async_op=True)
            world.send_bytes(0, b"entered")
            assert world.recv_bytes(0) == b"left"
            work.wait()
        else:
            assert world.recv_bytes(0) == b"left"
            if mode == "after":
                sub.all_reduce(x)
            else:
                sub.recv(x, 0)
        print("RETURNED", r, flush=True)
    except forestcc.ForestccError as e:
        print("RAISED", r, f"{type(e).__name__}: {e}".replace("\n", " "), flush=True)
    world.send_bytes(0, b"seen")
print("DONE", r, flush=True)
