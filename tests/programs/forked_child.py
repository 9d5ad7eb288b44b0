"""A rank forks a child (a DataLoader-style worker) that ends, by a normal exit or by SIGTERM;
the rank's shared-memory segments must stay, and the job must go on using them. (Before, the
child's exit handler or signal handler unlinked every segment in the table it inherited: the
parent's next collective on forestcc memory, or its connect, failed with "shm_open ... No such
file or directory".)

argv[1]: exit | sigterm. Prints "SEGMENTS <rank> kept" or "SEGMENTS <rank> lost <names>", then
"OK <rank>"."""
import os
import signal
import sys
import time

import numpy as np

import forestcc

mode = sys.argv[1]
comm = forestcc.init()
r, n = comm.rank, comm.size
buf = forestcc.zeros(1 << 16, np.float32)  # memory peers map by its segment's name
x = forestcc.zeros(1024, np.float32)
mine = f"{os.environ.get('FORESTCC_SHM_PREFIX', 'fcc')}-{os.getpid()}-"


def segments():
    return {name for name in os.listdir("/dev/shm") if name.startswith(mine)}


before = segments()
if r == 0:
    pid = os.fork()
    if pid == 0:  # the child
        if mode == "exit":
            sys.exit(0)  # a normal exit: runs the C atexit handlers it inherited
        time.sleep(600)  # until the SIGTERM
        os._exit(0)
    if mode == "sigterm":
        time.sleep(0.5)
        os.kill(pid, signal.SIGTERM)
    os.waitpid(pid, 0)
comm.barrier()
lost = before - segments()
print("SEGMENTS", r, "kept" if not lost else f"lost {sorted(lost)}", flush=True)
x[:] = r + 1
comm.all_reduce(x, algo="direct")  # reads the peers' buffers through their segments
assert (x == n * (n + 1) / 2).all(), x[:4]
if n > 1:
    comm.connect([p for p in range(n) if p != r], buf)
print("OK", r, flush=True)
