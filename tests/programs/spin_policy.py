"""Prints "SPIN <rank> <spin us> <yield us>": the wait policy the communicator resolved
(FORESTCC_SPIN_US, FORESTCC_YIELD_US)."""
import forestcc

comm = forestcc.init()
print("SPIN", comm.rank, comm._native.spin_us, comm._native.yield_us, flush=True)
