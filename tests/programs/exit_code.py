"""Rank 1 exits with the given code (or sleeps when 'sleep'); the others sleep until stopped.
Each rank first prints its pid, so a test can follow exactly its own processes."""
import os
import sys
import time

rank = int(os.environ["FORESTCC_RANK"])
print(f"started rank={rank} pid={os.getpid()}", flush=True)
if rank == 1 and sys.argv[1] != "sleep":
    sys.exit(int(sys.argv[1]))
time.sleep(600)
