"""Across emulated hosts: each rank joins the job (forestcc.init's rendezvous through rank 0's
address on h0) and prints what it was given and where it runs."""
import os
import socket

import forestcc

comm = forestcc.init()
e = os.environ
hosts = [b.decode() for b in comm.all_gather_bytes(socket.gethostname().encode())]
print(f"OK rank={comm.rank} size={comm.size} local={e['FORESTCC_LOCAL_RANK']}/"
      f"{e['FORESTCC_LOCAL_SIZE']} host={socket.gethostname()} root={e['FORESTCC_ROOT_ADDR']} "
      f"hosts={','.join(hosts)}", flush=True)
