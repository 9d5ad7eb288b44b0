"""How forestcc's exceptions reach torch.distributed users.

A bad argument raises :class:`ArgumentError` / :class:`ArgumentTypeError` before any rank
communicates: they are ``ValueError`` / ``TypeError`` (as in forestcc) and ``RuntimeError`` (as
torch's own backends raise). A failed job (a timeout, a dead peer, a mismatch found between
ranks, a poisoned communicator) raises ``torch.distributed.DistBackendError``, as NCCL's and
Gloo's process groups do. Calls forestcc cannot serve raise ``NotImplementedError`` (a
``RuntimeError``) naming the call. Every message starts with ``forestcc <call>:``.
"""
from __future__ import annotations

__all__ = ["ArgumentError", "ArgumentTypeError", "translate", "unsupported"]


class ArgumentError(ValueError, RuntimeError):
    """A bad argument to a process-group call (wrong size, root, split sizes...)."""


class ArgumentTypeError(TypeError, RuntimeError):
    """An argument of the wrong kind (dtype, device, tensor count)."""


def unsupported(call: str, what: str) -> NotImplementedError:
    """The error for something forestcc does not do, e.g.
    ``unsupported("allreduce", "ReduceOp.BAND")``."""
    return NotImplementedError(f"forestcc {call}: {what} is not supported by the forestcc backend")


def translate(exc: BaseException, call: str, *, started: bool = False) -> BaseException:
    """The exception a torch user should see for ``exc`` raised by forestcc during ``call``.
    ``started``: raised while waiting for the call, after it reached the peers; a ``ValueError``
    then (or one that forestcc's executor raised, "forestcc rank N: ...") reports a mismatch
    between ranks, which is a failure of the job, not of this rank's arguments."""
    from torch.distributed import DistBackendError

    from forestcc.errors import ForestccError

    if isinstance(exc, (ArgumentError, ArgumentTypeError, NotImplementedError, DistBackendError)):
        return exc
    between_ranks = isinstance(exc, ValueError) and (
        started or str(exc).startswith("forestcc rank"))
    if isinstance(exc, ForestccError) or between_ranks:
        kind = "mismatch between ranks" if between_ranks else type(exc).__name__
        return DistBackendError(f"forestcc {call}: {kind}: {exc}")
    if isinstance(exc, ValueError):
        return ArgumentError(f"forestcc {call}: {exc}")
    if isinstance(exc, TypeError):
        return ArgumentTypeError(f"forestcc {call}: {exc}")
    return exc
