"""Prints "SPIN <rank> <microseconds>": the busy-poll time FORESTCC_SPIN_US=auto resolved to."""
import forestcc

comm = forestcc.init()
print("SPIN", comm.rank, comm._native.spin_us, flush=True)
