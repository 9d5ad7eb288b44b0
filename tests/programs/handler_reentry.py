"""A signal handler that calls a collective while this rank is blocked in one is refused with a
RuntimeError (it would wait on the call it interrupted). Rank 1 joins late; rank 0's timer
handler fires while its all_reduce waits (it re-arms until it finds itself there). Prints
"REFUSED" on rank 0 and "OK 1" on rank 1 (whose call is then aborted). argv[1] "bootstrap": rank 0
waits in recv_bytes (a bootstrap exchange, which runs signal handlers too) and its handler calls
send_bytes: refused alike (it would take the bootstrap the interrupted exchange holds)."""
import signal
import sys
import time

import numpy as np

import forestcc
from forestcc.errors import ForestccError

BOOTSTRAP = len(sys.argv) > 1 and sys.argv[1] == "bootstrap"
comm = forestcc.init()
x = np.ones(100, np.float32)
if comm.rank == 1:
    time.sleep(5)
    try:
        if not BOOTSTRAP:  # (rank 0's recv_bytes needs no message: the handler interrupts it)
            comm.all_reduce(x)
    except ForestccError:
        pass
    print("OK 1", flush=True)
    sys.exit(0)

WAITING_IN = "recv_bytes" if BOOTSTRAP else "all_reduce"


def handler(sig, frame):
    if frame is None or frame.f_code.co_name != WAITING_IN:  # not yet inside the call
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        return
    if BOOTSTRAP:
        comm.send_bytes(1, b"from a handler")
    else:
        comm.barrier()


signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.2)
try:
    if BOOTSTRAP:
        comm.recv_bytes(1)
    else:
        comm.all_reduce(x)
    print("RETURNED", flush=True)
except RuntimeError as e:
    assert "signal handler" in str(e), str(e)
    print("REFUSED", flush=True)
