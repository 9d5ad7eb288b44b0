"""One rank's collective is refused for its arguments, and the rank catches the error and goes on
to its next collective. Its refusal takes the call's place (schedules/README.md, "Refused
calls"): every other rank's call raises a MismatchError naming it, and every rank's next call
raises, rather than the refusing rank's next call meeting the others' first (which returned their
data mixed with the next call's, as success). argv[1] says where the refusal comes from:
  python  the Python layer (a read-only x);
  api     the C++ API's checks (an out of the wrong size);
  async   the C++ API's checks of an async call queued behind another;
  plan    a plan file that does not exist;
  standin a gather whose output stand-in (a non-root rank's, which the engine allocates) rank 1
          cannot allocate (its address space limited with RLIMIT_AS): ForestccError there.
Prints "FIRST <rank> <exception>" and "SECOND <rank> <exception>" (or "... returned")."""
import resource
import sys

import numpy as np

import forestcc

CASE = sys.argv[1]
comm = forestcc.init()
R, N = comm.rank, comm.size
REFUSER = 1


STANDIN_COUNT = 8 << 20  # 32 MiB of float32 per rank: the stand-in of a non-root rank is N times that


def vm_size():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:"))


def standin_gather():
    x = np.full(STANDIN_COUNT, R + 1, np.float32)
    out = np.empty(STANDIN_COUNT * N, np.float32) if R == 0 else None
    if R != REFUSER:
        return comm.gather(out, x, 0)
    # Room for the call's small allocations (its plan for root 0), not for its stand-in.
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm_size() + (24 << 20), hard))
    try:
        return comm.gather(out, x, 0)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def first_call():
    x = np.full(8, R + 1, np.float32)
    if CASE == "standin":
        return standin_gather()
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
if CASE == "standin":
    # the same gather rooted at rank 1 (which then allocates no stand-in): every plan and scratch
    # the refused call needs is made already
    comm.gather(np.empty(STANDIN_COUNT * N, np.float32) if R == REFUSER else None,
                np.zeros(STANDIN_COUNT, np.float32), REFUSER)
for name, call in (("FIRST", first_call), ("SECOND", lambda: comm.all_reduce(np.full(8, 10.0 * (R + 1), np.float32)))):
    try:
        result = call()
        if hasattr(result, "wait"):
            result.wait()
        print(name, R, "returned", flush=True)
    except Exception as e:  # noqa: BLE001 - the test reads the type and the text
        print(name, R, type(e).__name__, str(e).replace("\n", " ")[:600], flush=True)
