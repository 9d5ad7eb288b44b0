"""Prints "SPIN <rank> <spin us> <yield us>": what FORESTCC_SPIN_US=auto and FORESTCC_YIELD_US=auto
resolved to."""
import forestcc

comm = forestcc.init()
print("SPIN", comm.rank, comm._native.spin_us, comm._native.yield_us, flush=True)
