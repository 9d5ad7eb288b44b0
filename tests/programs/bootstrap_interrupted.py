"""Ctrl-C interrupts rank 0 in a bootstrap exchange; a peer waiting on rank 0 must learn at
once that rank 0's bootstrap is broken (its connections closed), not at FORESTCC_TIMEOUT, while
rank 0 lives on (an exit would close them anyway).

argv[1]: a directory the ranks share; argv[2], the exchange:
  star  3 ranks: rank 0 waits in all_gather_bytes for rank 2, which stays away; rank 1 is in it
  p2p   2 ranks: over a connection already open, rank 1 waits in recv_bytes for rank 0, which
        waits in recv_bytes for rank 1
Prints "INTERRUPTED 0" on rank 0, "RAISED 1 <type>: <message>" (or "RETURNED 1") on rank 1."""
import os
import signal
import sys
import threading
import time

import forestcc

shared, mode = sys.argv[1], sys.argv[2]
reported = os.path.join(shared, "reported")
world = forestcc.init()
r = world.rank


def await_report():
    deadline = time.monotonic() + 600  # only there to turn a hang into a failure
    while not os.path.exists(reported):
        assert time.monotonic() < deadline, "rank 1 never reported"
        time.sleep(0.01)


if mode == "p2p" and r == 0:
    world.send_bytes(1, b"open")  # rank 1 reads from this connection below
if mode == "p2p" and r == 1:
    assert world.recv_bytes(0) == b"open"
if r == 0:
    def interrupt():
        time.sleep(2)  # into the native wait (were it earlier, Python would raise it anyway)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    try:
        world.all_gather_bytes(b"0") if mode == "star" else world.recv_bytes(1)
        print("RETURNED 0", flush=True)
    except KeyboardInterrupt:
        print("INTERRUPTED 0", flush=True)
    await_report()
elif r == 1:
    try:
        world.all_gather_bytes(b"1") if mode == "star" else world.recv_bytes(0)
        print("RETURNED 1", flush=True)
    except forestcc.ForestccError as e:
        print("RAISED 1", f"{type(e).__name__}: {e}".replace("\n", " "), flush=True)
    open(reported, "w").close()
else:
    await_report()
