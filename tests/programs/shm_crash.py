"""Allocates shared memory, prints the segment name, then dies as told (sigterm | sigkill | exit)."""
import os
import signal
import sys

import forestcc

a = forestcc.zeros(1 << 20)
from forestcc import _C  # noqa: E402

print("PID", os.getpid(), flush=True)
how = sys.argv[1]
if how == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
elif how == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
elif how == "segv":
    os.kill(os.getpid(), signal.SIGSEGV)
sys.exit(0)
