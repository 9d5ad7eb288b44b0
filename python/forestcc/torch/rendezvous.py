"""Finding the ranks: a forestcc communicator through torch's Store, and ``env://`` under
forestcc-run, mpirun and srun.

torch hands every process group a Store (a TCPStore under torchrun, prefixed per group). Rank 0
of the group makes a forestcc unique id and publishes it there; the others read it, so no port
beyond torch's own is agreed on in advance (the id names a port rank 0's system picked).

``init_process_group`` without ``init_method`` uses ``env://``, which needs ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``: torchrun sets them, forestcc-run and mpirun
do not. :func:`install_launcher_rendezvous` wraps torch's ``env://`` handler: when those
variables are missing but forestcc recognizes a launcher (forestcc-run, Open MPI, MPICH, Slurm),
the ranks meet through forestcc's bootstrap, rank 0 starts a TCPStore on a free port and tells
the others where it is. It also sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
``LOCAL_WORLD_SIZE`` where unset, as torchrun would. Under torchrun nothing changes.
"""
from __future__ import annotations

import os
from datetime import timedelta

__all__ = ["communicator_from_store", "install_launcher_rendezvous"]

# Launchers whose environment forestcc reads but torch's env:// does not.
_LAUNCHERS = ("forestcc-run", "openmpi", "mpich", "slurm")


def communicator_from_store(store, rank: int, size: int, timeout: timedelta):
    """A new forestcc communicator of ``size`` ranks, met through ``store`` (collective over the
    group's ranks). ``timeout`` bounds the rendezvous and every later wait."""
    import forestcc

    # Each creation on this store is a generation: a store reused after destroy_process_group
    # (same group name, same prefix) must not hand out the previous generation's id. Every rank
    # of generation g counts itself in before any rank can finish g (the bootstrap waits for all).
    joined = store.add("forestcc/joined", 1)
    key = f"forestcc/unique_id/{(joined - 1) // size}"
    if rank == 0:
        raw = bytes(forestcc.unique_id())
        store.set(key, raw)
    else:
        raw = bytes(store.get(key))
    return forestcc.init(unique_id=raw, rank=rank, size=size, timeout=timeout.total_seconds())


def install_launcher_rendezvous() -> None:
    """Make ``env://`` (init_process_group's default) work under forestcc-run, mpirun and srun
    (see the module docstring). Idempotent."""
    import importlib

    # torch.distributed.rendezvous is also the name of a function torch.distributed exports.
    rdzv = importlib.import_module("torch.distributed.rendezvous")
    original = rdzv._rendezvous_handlers.get("env")
    if original is None or getattr(original, "_forestcc", False):
        return

    def env_handler(url: str, timeout: timedelta = timedelta(minutes=30), **kwargs):
        if _torch_env_complete(url):
            return original(url, timeout=timeout, **kwargs)
        from forestcc import _C
        if _C.detect_launch().source not in _LAUNCHERS:
            return original(url, timeout=timeout, **kwargs)  # raises torch's own message
        return _launcher_rendezvous(timeout)

    env_handler._forestcc = True
    env_handler.__doc__ = original.__doc__
    rdzv._rendezvous_handlers["env"] = env_handler


def _torch_env_complete(url: str) -> bool:
    query = url.partition("?")[2]
    have = {kv.split("=", 1)[0] for kv in query.split("&") if kv}
    need = {"RANK": "rank", "WORLD_SIZE": "world_size"}
    return all(os.environ.get(v) or q in have for v, q in need.items()) \
        and bool(os.environ.get("MASTER_ADDR")) and bool(os.environ.get("MASTER_PORT"))


def _launcher_rendezvous(timeout: timedelta):
    from torch.distributed import TCPStore

    import forestcc
    from forestcc import _C

    comm = forestcc.init(timeout=timeout.total_seconds())
    rank, size = comm.rank, comm.size
    if rank == 0:
        store = TCPStore("0.0.0.0", 0, size, True, timeout=timeout, wait_for_workers=False)
        address = f"{_advertised_host(_C)}:{store.port}".encode()
    else:
        address = b""
    host, _, port = comm.all_gather_bytes(address)[0].decode().rpartition(":")
    if rank != 0:
        store = TCPStore(host, int(port), size, False, timeout=timeout)
    for name, value in (("RANK", rank), ("WORLD_SIZE", size), ("LOCAL_RANK", comm.local_rank),
                        ("LOCAL_WORLD_SIZE", comm.local_size)):
        os.environ.setdefault(name, str(value))
    yield store, rank, size
    raise RuntimeError("forestcc: cannot re-rendezvous through the launcher's environment")


def _advertised_host(_C) -> str:
    # The interface forestcc's own bootstrap chose (FORESTCC_ROOT_ADDR under forestcc-run).
    root = _C.detect_launch().root_address
    if root:
        return root.rpartition(":")[0]
    return _C.UniqueId.create().address.rpartition(":")[0]
