"""Collective calls on a Communicator (torch.distributed-style names).

Every method hands its arrays to the C++ collective API (``forestcc/collective_api.hpp``, the
same path C++ programs and the NCCL shim take), which checks the arguments before any rank
communicates (errors name the argument), picks a
plan (``algo="auto"``: the tuning table, see :mod:`forestcc.tuning`; a built-in algorithm name;
a path to a plan file; or a plan dict) and runs it with the GIL released. Arrays are numpy
arrays, PyTorch CPU tensors, JAX CPU arrays (as inputs: they are immutable) or anything with the
buffer protocol or DLPack. With ``async_op=True`` a call returns a work handle at once
(``wait()`` returns the result array, ``is_completed()`` polls); collectives on one communicator
run one at a time in call order, synchronous ones after queued ones (sends and receives in
orders of their own). Call order is per thread: use one thread per communicator, since ranks
whose threads interleave calls differently pair them differently (same-shaped calls would then
exchange data silently).

GPU memory (CuPy arrays, PyTorch CUDA tensors, anything with ``__cuda_array_interface__`` or
CUDA DLPack): a call is enqueued on ``stream`` (default: the current stream of the array's
framework; also an int ``cudaStream_t``, a ``torch.cuda.Stream`` or a CuPy stream) and returns
at once, as NCCL's calls do: synchronize the stream before reading the result on the host. An
error on the GPU (a wait past ``FORESTCC_TIMEOUT``, a dead peer) is raised by
:meth:`~CollectivesMixin.synchronize`, by the async handle's ``wait()``, or by the next call.
"""
from __future__ import annotations

import os
from typing import Any

from forestcc import _C

__all__ = ["CollectivesMixin", "COLLECTIVE_TABLE"]

#: One row per plan collective, from the C++ table (``forestcc/plan.hpp``) that checks calls and
#: sizes buffers: ``rooted``, ``reduces``, ``input`` / ``output`` blocks (``"none"``, ``"one"``
#: or ``"per_rank"``, of ``count`` elements each), ``root_only`` (the buffer only the root
#: passes) and ``in_place`` (whether an in-place form exists). all_to_all_v is all_to_all with
#: uneven blocks.
COLLECTIVE_TABLE = {row["name"]: row for row in _C.collective_table()}


class CollectivesMixin:
    """The collective methods of :class:`forestcc.Communicator` (needs ``self._engine``)."""

    _engine: Any
    _plan_files: dict

    # -- selection -----------------------------------------------------------------------

    def _resolve_plan(self, algo):
        """The engine's callback for an ``algo`` that is not a built-in name: a plan file path,
        a plan dict or a compiled plan. A plan file or dict is proven before its first run
        (forestcc.plan.proof: once per content, remembered on disk); a file is compiled once per
        file version, a dict at each call; a refused one raises PlanError naming the file, on
        every rank."""
        if isinstance(algo, dict):
            from forestcc.plan import proof
            return self._engine.compile(proof.proven_dict(algo))
        if isinstance(algo, (str, os.PathLike)):
            path = os.fspath(algo)
            if not os.path.exists(path):
                from forestcc import tuning
                raise ValueError(f"algo: {algo!r} is neither 'auto', a built-in algorithm "
                                 f"({', '.join(sorted(tuning.builtin_algorithms()))}) nor an "
                                 f"existing plan file")
            st = os.stat(path)
            key = (os.path.abspath(path), st.st_mtime_ns, st.st_size, st.st_ino)
            compiled = self._plan_files.get(key)
            if compiled is None:
                from forestcc.plan import proof
                compiled = self._engine.compile(proof.load_proven(path))
                self._plan_files[key] = compiled
            return compiled
        raise TypeError(f"algo: expected 'auto', an algorithm name, a plan file path or a plan "
                        f"dict, got {type(algo).__name__}")

    # -- collectives ---------------------------------------------------------------------

    def all_reduce(self, x, op: str = "sum", out=None, algo="auto", async_op: bool = False, stream=None):
        """Reduce ``x`` over all ranks with ``op`` (sum, prod, min, max, avg); the result lands
        in ``out`` (default: in ``x``, in place) on every rank. Returns the result array."""
        return self._engine.all_reduce(x, op, out, algo, async_op, stream)

    def all_gather(self, out, x, algo="auto", async_op: bool = False, stream=None):
        """``out`` (size × len(x)) receives every rank's ``x`` in rank order. In place when
        ``x`` is ``out``'s block number ``rank``."""
        return self._engine.all_gather(out, x, algo, async_op, stream)

    def reduce_scatter(self, out, x, op: str = "sum", algo="auto", async_op: bool = False, stream=None):
        """``x`` (size × len(out)) is reduced over all ranks; rank r gets block r in ``out``.
        In place when ``out`` is ``x``'s block number ``rank``."""
        return self._engine.reduce_scatter(out, x, op, algo, async_op, stream)

    def all_to_all(self, out, x, algo="auto", async_op: bool = False, stream=None):
        """Block p of ``x`` goes to rank p, which stores it as block ``rank`` of its ``out``.
        ``x`` is split into size equal blocks; ``out`` may be ``x`` (in place)."""
        return self._engine.all_to_all(out, x, algo, async_op, stream)

    def all_to_all_v(self, out, x, out_splits, in_splits, algo="auto", async_op: bool = False, stream=None):
        """all_to_all with uneven blocks: ``in_splits[p]`` elements of ``x`` go to rank p, and
        ``out_splits[p]`` elements arrive from rank p (blocks packed in rank order)."""
        return self._engine.all_to_all_v(out, x, out_splits, in_splits, algo, async_op, stream)

    def broadcast(self, x, root: int, algo="auto", async_op: bool = False, stream=None):
        """Every rank's ``x`` becomes the root's ``x`` (in place)."""
        return self._engine.broadcast(x, root, algo, async_op, stream)

    def reduce(self, x, root: int, op: str = "sum", out=None, algo="auto",
               async_op: bool = False, stream=None):
        """Like all_reduce, but only ``root`` is guaranteed the result (in ``out``, default
        ``x``). In place, ``x`` on the other ranks may be used as scratch; pass ``out`` (on every
        rank) to keep it intact."""
        return self._engine.reduce(x, root, op, out, algo, async_op, stream)

    def gather(self, out, x, root: int, algo="auto", async_op: bool = False, stream=None):
        """The root's ``out`` (size × len(x)) receives every rank's ``x``; other ranks may pass
        ``out=None``."""
        return self._engine.gather(out, x, root, algo, async_op, stream)

    def scatter(self, out, x, root: int, algo="auto", async_op: bool = False, stream=None):
        """Rank r receives block r of the root's ``x`` (size × len(out)) in ``out``; other
        ranks may pass ``x=None``."""
        return self._engine.scatter(out, x, root, algo, async_op, stream)

    def barrier(self, algo="auto", async_op: bool = False, stream=None):
        """Return once every rank has entered the barrier."""
        return self._engine.barrier(algo, async_op, stream)

    def synchronize(self) -> None:
        """Block until every collective and send/recv this communicator enqueued on GPU memory
        has finished on the GPU, and raise the first error one of them hit (a wait past
        FORESTCC_TIMEOUT, a dead peer, a mismatch), naming the rank, the peer and the plan step.
        Calls on host memory finish before they return and need no synchronize."""
        self._engine.synchronize()

    def send(self, x, peer: int, async_op: bool = False, stream=None):
        """Send ``x`` to ``peer``, which calls ``recv`` with an array of the same size. Blocks
        until the receiver has the data (a rendezvous): exchange with async_op=True. GPU memory
        (the receiver's too) is copied on ``stream`` (default: the array framework's current
        stream): the call returns once the copy is enqueued, and later work on the stream may
        overwrite ``x`` (it runs after the receiver's copy read it). A send (recv, send_recv)
        refused for its arguments still takes its place: the peer's matching call raises
        MismatchError naming this rank, and later messages between the two match as before."""
        return self._engine.send(x, peer, async_op, stream)

    def recv(self, out, peer: int, async_op: bool = False, stream=None):
        """Receive into ``out`` what ``peer`` sends; returns ``out``. GPU memory: the data is
        ready for later work on ``stream`` (default: the framework's current stream)."""
        return self._engine.recv(out, peer, async_op, stream)

    def send_recv(self, sends=(), recvs=(), async_op: bool = False, stream=None):
        """One batch of sends and receives, ``(array, peer)`` pairs, whose exchanges with every
        peer progress at once (torch's ``batch_isend_irecv``, NCCL's group of sends and
        receives): within one batch on each side no order of peers can deadlock. Messages
        between two ranks match in order, whatever the batches on either side (a batch of two
        sends may be received by two ``recv`` calls, and the reverse), each of the same size and
        memory kind (GPU memory to GPU memory, host to host) as its match; a send completes when
        its receiver has copied it, so a batch returns once every message it sent was received
        (it waits for the peer's later batches when the peer's next one takes fewer). GPU arrays
        (all on one device) are copied on ``stream`` (default: the current stream of the first
        GPU array's framework). Returns None, or a handle with ``async_op``."""
        return self._engine.send_recv(list(sends), list(recvs), async_op, stream)
