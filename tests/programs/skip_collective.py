"""Three ranks; one rank (the skipper) stays away from a collective the other two call. The waiter's
plan wait must end at its FORESTCC_TIMEOUT with a TimeoutError naming the plan step and the rank
it waited for; that poisons the communicator, so the third rank (waiting in the same call) and
the skipper (in no call at all) get AbortedError, and every rank's next collective fails at once
instead of hanging.

usage: skip_collective.py COLLECTIVE ALGO WAITER SKIPPER
Only the waiter runs with FORESTCC_TIMEOUT=5; the others with a timeout they never reach (their
waits end by the poison, not by their own clock), so which rank times out does not depend on the
machine's speed. The communicator under test is made once every rank is up (through the job's
own), so a slow start cannot spend the waiter's 5 s in the rendezvous.
Prints "RESULT <rank> <error class> peer=<peer> <message>" and "NEXT <rank> <error class> ..."
(the call after the error) on every rank.
"""
import os
import sys
import time

import numpy as np

# Before forestcc reads it: only there to turn a hang into a failure.
os.environ["FORESTCC_TIMEOUT"] = "200"
SKIPPER_WAITS = 150  # seconds the skipper waits for the poison: likewise

import forestcc

collective, algo, waiter, skipper = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
world = forestcc.init()
rank = world.rank
assert world.size == 3
uid = forestcc.unique_id() if rank == 0 else None
uid = world.all_gather_bytes(bytes(uid) if rank == 0 else b"")[0]
if rank == waiter:
    os.environ["FORESTCC_TIMEOUT"] = "5"
comm = forestcc.init(unique_id=uid, rank=rank, size=3)
x = np.arange(4099, dtype=np.float32)


def call():
    if collective == "all_reduce":
        comm.all_reduce(x, algo=algo)
    elif collective == "broadcast":
        comm.broadcast(x, 0, algo=algo)
    elif collective == "all_gather":
        comm.all_gather(np.empty(3 * x.size, x.dtype), x, algo=algo)
    elif collective == "barrier":
        comm.barrier(algo=algo)
    else:
        raise ValueError(collective)


def report(tag, e):
    message = str(e).replace("\n", " ")
    print(tag, rank, type(e).__name__, f"peer={getattr(e, 'peer', None)}", message, flush=True)


if rank != skipper:
    try:
        call()
        print("RESULT", rank, "no error", flush=True)
    except forestcc.ForestccError as e:
        report("RESULT", e)
else:
    # Stays away from the collective: no call at all, only a look at the communicator's health.
    deadline = time.monotonic() + SKIPPER_WAITS
    while True:
        try:
            comm._native.check_healthy()  # no public form; a poll, not a call
        except forestcc.ForestccError as e:
            report("RESULT", e)
            break
        if time.monotonic() > deadline:
            print("RESULT", rank, "never poisoned", flush=True)
            break
        time.sleep(0.05)
try:
    call()
    print("NEXT", rank, "no error", flush=True)
except forestcc.ForestccError as e:
    report("NEXT", e)
