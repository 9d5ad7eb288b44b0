"""Rank 0 of a 2-rank job waits; an impostor with the same address but another magic tries to
join as rank 1 and must be refused with a clear reason."""
import subprocess
import sys

import forestcc
from forestcc import _C

uid = forestcc.unique_id()
impostor = _C.UniqueId.from_address(uid.address, uid.magic ^ 0xDEAD)
code = ("import sys, forestcc; from forestcc import _C\n"
        f"uid = _C.UniqueId.from_bytes(bytes.fromhex('{bytes(impostor).hex()}'))\n"
        "try:\n    forestcc.init(unique_id=uid, rank=1, size=2)\n"
        "except ValueError as e:\n    print('REFUSED', e); sys.exit(0)\n"
        "print('JOINED'); sys.exit(1)\n")
child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
try:
    forestcc.init(unique_id=uid, rank=0, size=2, timeout=5)
    print("ROOT JOINED (unexpected)")
except forestcc.TimeoutError as e:
    assert "rank(s) 1 of 2 never connected" in str(e), e
out, _ = child.communicate(timeout=60)
print(out, end="")
sys.exit(child.returncode)
