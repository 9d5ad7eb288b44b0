"""Rank 1 refuses a send or receive for its arguments, catches the error and goes on. Its refused
messages still take their places (schedules/README.md, "Refused calls"): rank 0's messages that
would have matched them raise a MismatchError naming rank 1, and the pair stays in step: the next
exchange between them delivers the right data, and a collective of every rank works. Without
this, rank 0's receive met rank 1's next send (its data, returned as success). argv[1]:
  send    the Python layer refuses a send (x is no array); rank 0 receives;
  recv    the Python layer refuses a receive (out is read-only); rank 0 sends;
  api     the C++ API refuses a send_recv batch (its send and receive buffers overlap);
  malformed the Python layer refuses a send_recv batch with a malformed item among its sends:
          the messages before and after it, its receive included, still take their places;
  batch   the batch itself refuses (a send to rank 1 itself without its receive), before any
          peer is told of it;
  async   an async send refused while an earlier async send is still queued;
  split   a refused receive takes the first of the two messages of rank 0's batch; rank 1's next
          receive gets the second.
Prints "FIRST <rank> <result>", "SECOND <rank> <result>", "THIRD <rank> <result>", a result being
"ok", "wrong ..." or "<exception> <message>"."""
import sys

import numpy as np

import forestcc

CASE = sys.argv[1]
comm = forestcc.init()
R, N = comm.rank, comm.size
REFUSER, PARTNER = 1, 0


def values(rank, salt):
    return np.arange(16, dtype=np.float32) + 100 * rank + salt


def first_call():
    buf = np.zeros(16, np.float32)
    if R == REFUSER:
        if CASE == "send":
            return comm.send(object(), PARTNER)
        if CASE == "recv":
            out = np.zeros(16, np.float32)
            out.flags.writeable = False
            return comm.recv(out, PARTNER)
        if CASE == "api":
            x = values(R, 1)
            return comm.send_recv(sends=[(x, PARTNER)], recvs=[(x, PARTNER)])
        if CASE == "batch":
            return comm.send_recv(sends=[(values(R, 1), PARTNER), (values(R, 2), R)])
        if CASE == "malformed":
            return comm.send_recv(sends=[(values(R, 1), PARTNER), "no pair"], recvs=[(buf, PARTNER)])
        if CASE == "async":
            earlier = comm.send(values(R, 7), PARTNER, async_op=True)
            try:
                return comm.send(object(), PARTNER, async_op=True)
            finally:
                earlier.wait()
        if CASE == "split":
            out = np.zeros(16, np.float32)
            out.flags.writeable = False
            try:
                return comm.recv(out, PARTNER)
            finally:
                # the second message of rank 0's batch is this receive's
                got = comm.recv(np.zeros(16, np.float32), PARTNER)
                print("SPLIT", R, "ok" if np.array_equal(got, values(PARTNER, 2)) else f"wrong {got[:4]}", flush=True)
    elif R == PARTNER:
        if CASE in ("send", "batch"):
            return comm.recv(buf, REFUSER)
        if CASE == "recv":
            return comm.send(values(R, 1), REFUSER)
        if CASE in ("api", "malformed"):
            return comm.send_recv(sends=[(values(R, 1), REFUSER)], recvs=[(buf, REFUSER)])
        if CASE == "async":
            got = comm.recv(np.zeros(16, np.float32), REFUSER)
            print("EARLIER", R, "ok" if np.array_equal(got, values(REFUSER, 7)) else f"wrong {got[:4]}", flush=True)
            return comm.recv(buf, REFUSER)
        if CASE == "split":
            return comm.send_recv(sends=[(values(R, 1), REFUSER), (values(R, 2), REFUSER)])
    return None


def second_call():
    # both ways between the pair: each receives what the other sends now
    if R not in (REFUSER, PARTNER):
        return "ok"
    peer = PARTNER if R == REFUSER else REFUSER
    got = np.zeros(16, np.float32)
    comm.send_recv(sends=[(values(R, 3), peer)], recvs=[(got, peer)])
    return "ok" if np.array_equal(got, values(peer, 3)) else f"wrong {got[:4]}"


def third_call():
    x = np.full(4, R + 1, np.float32)
    comm.all_reduce(x)
    return "ok" if np.all(x == N * (N + 1) / 2) else f"wrong {x}"


for name, call in (("FIRST", first_call), ("SECOND", second_call), ("THIRD", third_call)):
    try:
        result = call()
        print(name, R, result if isinstance(result, str) else "ok", flush=True)
    except Exception as e:  # noqa: BLE001 - the test reads the type and the text
        print(name, R, type(e).__name__, str(e).replace("\n", " ")[:600], flush=True)
