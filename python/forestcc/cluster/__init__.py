"""Emulated clusters: hosts made of Linux namespaces on one machine, for running and testing
forestcc (and mpirun, torch.distributed) across "machines" without having them.
See `forestcc-cluster --help` and the README's "Several machines"."""
from .cluster import Cluster, clean, list_clusters
from .host import Host
from .shaping import Shaping
from .system import ClusterError

__all__ = ["Cluster", "Host", "Shaping", "ClusterError", "clean", "list_clusters"]
