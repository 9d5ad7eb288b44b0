# Before-build runs only: drop the system's editable forestcc finder (it points at /work/main),
# so forestcc and forestcc_perf come from PYTHONPATH (the df1190f tree with its own build).
import sys
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != "_editable_skbc_forestcc"]
