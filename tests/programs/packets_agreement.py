"""Ranks whose FORESTCC_PACKETS settings differ but whose calls decide alike run together: the
stamps compare whether a call moves its data as packets, not the setting. argv[1]:
  small  rank 0 auto, the others off: on host memory auto means signals, as off does;
  large  rank 0 on, rank 1 off, the others auto: a call whose packets would not fit the packet
         bank uses signals whatever the setting.
Each rank checks an eager all_reduce against the numpy sum and prints "OK <rank>"."""
import os
import sys

import numpy as np

CASE = sys.argv[1]
R = int(os.environ["FORESTCC_RANK"])
if CASE == "small":
    os.environ["FORESTCC_PACKETS"] = "auto" if R == 0 else "off"
    COUNT = 100
else:
    os.environ["FORESTCC_PACKETS"] = {0: "on", 1: "off"}.get(R, "auto")
    COUNT = 96 << 10  # 384 KiB of float32: an eager bank holds its scratch, the packet bank not

import forestcc  # noqa: E402  (the setting is read when the communicator is made)

comm = forestcc.init()
N = comm.size
x = np.arange(COUNT, dtype=np.float32) * (R + 1)
comm.all_reduce(x, algo="eager")
expected = np.arange(COUNT, dtype=np.float32) * (N * (N + 1) // 2)
assert np.array_equal(x, expected), f"rank {R}: wrong result"
print("OK", R, flush=True)
