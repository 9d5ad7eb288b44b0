"""A program that handles SIGTERM itself (checkpoint-on-SIGTERM), installed before forestcc.init():
the signal must not cost it its communicator. Rank 0 sends itself SIGTERM between two
collectives; both ranks then run more collectives and must get the right sums. Prints "OK <rank>".
argv[1] "default": no handler of its own; rank 0's SIGTERM then ends it (and forestcc-run the job)."""
import os
import signal
import sys

import numpy as np

caught = []
if sys.argv[1:] != ["default"]:
    signal.signal(signal.SIGTERM, lambda sig, frame: caught.append(sig))

import forestcc  # noqa: E402 - the handler comes first, as in the programs this guards

comm = forestcc.init()
R, N = comm.rank, comm.size
x = forestcc.zeros(1000, np.float32)  # shared memory: its segment must survive the signal
y = forestcc.zeros(1000, np.float32)  # peers map it only after the signal
x[:] = R + 1
comm.all_reduce(x, algo="direct")
if R == 0:
    os.kill(os.getpid(), signal.SIGTERM)  # its handler runs at the next bytecode boundary
comm.barrier()
for buf in (x, y, x):
    buf[:] = R + 1
    comm.all_reduce(buf, algo="direct")
    assert (buf == N * (N + 1) / 2).all(), buf[:4]
assert R != 0 or caught == [signal.SIGTERM], caught
print("OK", R, flush=True)
