"""forestcc's exceptions and configuration table.

Bad arguments raise ``ValueError``/``TypeError`` before anything is sent. Failures of the job
raise subclasses of :class:`ForestccError` that carry ``.rank`` (who saw it) and ``.peer`` (who
caused it), and for an error at a plan step ``.collective``, ``.plan``, ``.worker`` and ``.step``
(None elsewhere): :class:`TimeoutError` (also a builtin ``TimeoutError``), :class:`RemoteError` (a peer
died or closed its connection; also a ``ConnectionError``), :class:`AbortedError` (the
communicator was poisoned by an earlier error, here or on a peer) and :class:`MismatchError` (the
ranks' calls disagree: collective, root, dtype, op, count, algorithm or plan; raised on every rank
of that call; also a ``ValueError``).
"""
from __future__ import annotations

from forestcc import _C

ForestccError = _C.ForestccError
TimeoutError = _C.TimeoutError  # noqa: A001 - deliberately shadows the builtin inside forestcc
RemoteError = _C.RemoteError
AbortedError = _C.AbortedError
MismatchError = _C.MismatchError

__all__ = ["ForestccError", "TimeoutError", "RemoteError", "AbortedError", "MismatchError",
           "config_table"]


def config_table() -> list[tuple[str, str, str, str]]:
    """Every configuration knob as (environment variable, type, default, documentation)."""
    return [tuple(row) for row in _C.config_table()]
