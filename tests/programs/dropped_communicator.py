"""Rank 0 queues an async all_reduce on a split communicator and drops the handle, the array and
the communicator before rank 1 has entered the call (rank 1 waits for rank 0's word through the
world communicator's bootstrap). The dropped communicator must finish the queued call before it
lets the array go: rank 1 gets the right sum and rank 0 neither crashes nor corrupts its heap
(before, the call ran on freed memory: rank 1 got other numbers, silently, or rank 0 died).
Prints "RESULT ok" or "RESULT wrong ..." on rank 1 and "DONE <rank>" on both."""
import gc

import numpy as np

import forestcc

COUNT = 4096
world = forestcc.init()
sub = world.split(0)
if world.rank == 0:
    x = np.full(COUNT, 1.0, np.float32)
    sub.all_reduce(x, async_op=True)  # its handle dropped at once
    del x
    world.send_bytes(1, b"queued")  # rank 1 enters only now
    junk = [np.full(COUNT, 1000.0 + i, np.float32) for i in range(50)]  # would reuse the freed array
    del sub
    gc.collect()
else:
    assert world.recv_bytes(0) == b"queued"
    y = np.full(COUNT, 2.0, np.float32)
    sub.all_reduce(y)
    print("RESULT", "ok" if (y == 3.0).all() else f"wrong {y[:4]}", flush=True)
    del sub
world.barrier()
print("DONE", world.rank, flush=True)
