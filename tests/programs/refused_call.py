"""One rank's collective is refused for its arguments, and the rank catches the error and goes on
to its next collective. Its refusal takes the call's place (schedules/README.md, "Refused
calls"): every other rank's call raises a MismatchError naming it, and every rank's next call
raises, rather than the refusing rank's next call meeting the others' first (which returned their
data mixed with the next call's, as success). argv[1] says where the refusal comes from:
  python  the Python layer (a read-only x);
  api     the C++ API's checks (an out of the wrong size);
  async   the C++ API's checks of an async call queued behind another;
  plan    a plan file that does not exist.
Prints "FIRST <rank> <exception>" and "SECOND <rank> <exception>" (or "... returned")."""
import sys

import numpy as np

import forestcc

CASE = sys.argv[1]
comm = forestcc.init()
R, N = comm.rank, comm.size
REFUSER = 1


def first_call():
    x = np.full(8, R + 1, np.float32)
    if R != REFUSER:
        return comm.all_reduce(x)
    if CASE == "python":
        x.flags.writeable = False
        return comm.all_reduce(x)
    if CASE == "api":
        return comm.all_reduce(x, out=np.empty(7, np.float32))
    if CASE == "async":
        comm.all_reduce(np.ones(4, np.float32), async_op=True)  # queued; every rank makes it
        return comm.all_reduce(x, out=np.empty(7, np.float32), async_op=True)
    return comm.all_reduce(x, algo="/nonexistent/plan.json")


if CASE == "async" and R != REFUSER:
    comm.all_reduce(np.ones(4, np.float32), async_op=True).wait()
for name, call in (("FIRST", first_call), ("SECOND", lambda: comm.all_reduce(np.full(8, 10.0 * (R + 1), np.float32)))):
    try:
        result = call()
        if hasattr(result, "wait"):
            result.wait()
        print(name, R, "returned", flush=True)
    except Exception as e:  # noqa: BLE001 - the test reads the type and the text
        print(name, R, type(e).__name__, str(e).replace("\n", " ")[:600], flush=True)
