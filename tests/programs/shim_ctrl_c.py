"""The NCCL shim in a Python program that also imported forestcc (so forestcc's Python interrupt
check is set): a Ctrl-C while rank 0's ncclAllReduce waits for rank 1 belongs to the program.
The call runs to its end and returns ncclSuccess with the sum, and the KeyboardInterrupt is
raised when control is back in Python, as after any native call. (Before, the shim's wait ran
Python's handlers itself: ncclAllReduce failed with ncclSystemError and the KeyboardInterrupt
was swallowed.)

argv[1]: a directory the ranks share. Prints on rank 0 "KEYBOARDINTERRUPT sum=<ok|wrong>
async=<code>" or "NOINTERRUPT result=<code> sum=<...>", on the others "RESULT <code> sum=<...>"."""
import ctypes
import os
import signal
import sys
import threading
import time

import numpy as np

import forestcc
from forestcc.config_cli import nccl_shim_path

NCCL_FLOAT32, NCCL_SUM, COUNT = 7, 0, 1024


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


shared = sys.argv[1]
world = forestcc.init()  # the Python module's interrupt check is set from here on
r, n = world.rank, world.size
lib = ctypes.CDLL(str(nccl_shim_path()))
uid = UniqueId()
if r == 0:
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0
    for p in range(1, n):
        world.send_bytes(p, bytes(uid))
else:
    uid = UniqueId.from_buffer_copy(world.recv_bytes(0))
comm = ctypes.c_void_p()
assert lib.ncclCommInitRank(ctypes.byref(comm), n, uid, r) == 0
x = np.full(COUNT, r + 1, np.float32)
want = n * (n + 1) / 2
go = os.path.join(shared, "interrupted")


def summed():
    return "ok" if (x == want).all() else f"wrong {x[:4]}"


def all_reduce():
    return lib.ncclAllReduce(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(x.ctypes.data),
                             ctypes.c_size_t(COUNT), NCCL_FLOAT32, NCCL_SUM, comm, None)


if r == 0:
    def interrupt():
        time.sleep(2)  # into the shim's wait (were it earlier, Python would raise it anyway)
        os.kill(os.getpid(), signal.SIGINT)
        open(go, "w").close()  # the others enter the call only now

    threading.Thread(target=interrupt, daemon=True).start()
    result = None
    try:
        result = all_reduce()
        for _ in range(500):  # the pending KeyboardInterrupt raises here at the latest
            time.sleep(0.01)
        print("NOINTERRUPT", f"result={result}", f"sum={summed()}", flush=True)
    except KeyboardInterrupt:
        code = ctypes.c_int(-1)
        lib.ncclCommGetAsyncError(comm, ctypes.byref(code))
        print("KEYBOARDINTERRUPT", f"sum={summed()}", f"async={code.value}", flush=True)
else:
    deadline = time.monotonic() + 600  # only there to turn a hang into a failure
    while not os.path.exists(go):
        assert time.monotonic() < deadline, "rank 0 never sent its SIGINT"
        time.sleep(0.01)
    result = all_reduce()
    print("RESULT", result, f"sum={summed()}", flush=True)
lib.ncclCommDestroy(comm)
