"""Under a real mpirun: forestcc.init() from Open MPI's environment (file rendezvous), or with
mpi4py imported, by broadcasting the unique id through MPI.COMM_WORLD."""
import sys

if sys.argv[1] == "1":
    from mpi4py import MPI  # noqa: F401  (imported: forestcc.init() uses it)
    mpi_rank = MPI.COMM_WORLD.Get_rank()
else:
    import os
    mpi_rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
import forestcc

comm = forestcc.init()
assert comm.all_gather_bytes(bytes([comm.rank])) == [bytes([r]) for r in range(comm.size)]
print(f"OK rank={comm.rank} size={comm.size} mpi_rank={mpi_rank}", flush=True)
