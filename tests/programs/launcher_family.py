"""Each rank starts a child (a grandchild of forestcc-run) and, with 'shm', allocates shared
memory; prints "FAMILY <rank> <pid> <child pid>", then sleeps until killed."""
import os
import subprocess
import sys
import time

if len(sys.argv) > 1 and sys.argv[1] == "shm":
    import forestcc
    buf = forestcc.zeros(1 << 16)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"FAMILY {os.environ['FORESTCC_RANK']} {os.getpid()} {child.pid}", flush=True)
time.sleep(600)
