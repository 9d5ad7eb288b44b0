"""forestcc-perf: an nccl-tests-compatible benchmark of collectives on forestcc and its peers.

``forestcc-perf all_reduce -b 8 -e 64M -f 2`` (or ``all_reduce_perf ...``) prints the nccl-tests
table; ``--backend mpi|gloo|nccl`` measures a peer library instead and ``--compare mpi,gloo``
measures peers next to forestcc in the same launch. See perf/README.md.
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
