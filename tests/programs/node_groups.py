import forestcc

comm = forestcc.init()
print(f"rank={comm.rank} nodes={comm.node_count} "
      f"node_of={[comm.node_of(r) for r in range(comm.size)]} local={comm.local_ranks}", flush=True)
