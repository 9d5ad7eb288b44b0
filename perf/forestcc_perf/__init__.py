"""forestcc-perf: an nccl-tests-compatible benchmark of collectives on forestcc and its peers.

``forestcc-perf all_reduce -b 8 -e 64M -f 2`` (or ``all_reduce_perf ...``) prints the nccl-tests
table; ``--backend mpi|gloo|nccl`` measures a peer library instead and ``--compare mpi,gloo``
measures peers next to forestcc in the same launch. See perf/README.md.
"""
from __future__ import annotations

import os

# The benchmark computes nothing itself, but numpy's OpenBLAS and torch's OpenMP start a worker
# thread per core that spins after use; on a small machine those threads take cores from the
# ranks of every backend alike and turn microsecond calls into millisecond outliers. One thread
# each, unless the user chose otherwise (set before numpy or torch is imported).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

__version__ = "0.1.0"
__all__ = ["__version__"]
