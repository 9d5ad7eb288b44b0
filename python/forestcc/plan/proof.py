"""Plans are proven before they run: what ``algo="plan.json"`` and ``algo={...}`` do before the
executor.

``load_proven(path)`` returns the plan dict of a file that passed, ``proven_dict(plan)`` a plan
dict that passed, in this order:

1. the format's validator (format.py: structure, ranges and the limits ops.MAX_*), as
   ``forestcc plan verify`` runs it;
2. the static checks (verifier.balance_issues: on every channel pair, signals sent equal the
   peer's waits), cheap for any size;
3. the full proof (verifier.verify) when it fits in ``MAX_WORK`` work units and ``MAX_MEMORY``
   bytes, counted by the verifier (never timed, so every rank decides alike). A plan too large
   for that is refused unless a proof of its exact content is on record (``forestcc plan
   verify`` and ``forestcc plan generate forest`` record one for what they verified, whatever
   its size: ``record_proof``). (Until session 25 it ran with the static checks alone; a plan
   could declare a huge ``chunks_per_block`` to be "too large", and its wrong result ran.)

Any failure raises PlanError naming the file, on every rank alike (each verifies the same bytes).
The outcome is remembered per content (SHA-256 of the file's bytes; of a dict's canonical text,
``dumps``) and verifier version: in memory for the process, and on disk in ``cache_dir()`` so
that the next job, and the other ranks of a node (which wait on a file lock while one of them
verifies), do not prove it again.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from pathlib import Path

from forestcc import _C

from . import format as plan_format
from . import verifier

__all__ = ["MAX_MEMORY", "MAX_WORK", "PROVEN", "REFUSED", "STATIC_ONLY", "cache_dir",
           "load_proven", "plan_status", "proven_dict", "record_proof", "verifier_version"]

# Limits of the proof at load. The verifier's cost grows with its ops, the clock entries its
# waits join (clocks projected per rank: plan/clocks.py) and the chunks x
# ranks reductions sum: a 128-rank forest all_reduce (87k ops) takes 5 million units, 1.7 CPU
# seconds and 0.2 GB; the 256-rank all_gather 4.5 million; the 256-rank all_reduce (325k ops)
# 17.8 million (34 million before the co-access projection of plan/clocks.py, and then only
# the static checks). See schedules/README.md, "Before a plan file
# runs", for the measurements.
MAX_WORK = 30_000_000        # work units: at most about 15 CPU seconds of the development machine
MAX_MEMORY = 1 << 30         # bytes of vector clocks and chunk records

# Outcomes, as recorded and as plan_status() reports them.
PROVEN = "proven"
STATIC_ONLY = "static checks only (too large to prove at load)"
REFUSED = "refused"

# Sources whose content decides what the verifier accepts: their digest is its version.
_VERIFIER_SOURCES = ("verifier.py", "clocks.py", "format.py", "semantics.py", "geometry.py",
                     "ops.py")

# In-process memory: digest -> (outcome, error messages).
_seen: dict = {}
_version: str | None = None


def verifier_version() -> str:
    """A digest of the verifier's sources, Python and C++ (the parser, validator and verifier
    parts in _C, whose digest the build compiles in: _C.plan.VERIFIER_CPP_DIGEST): a recorded
    proof holds for this version only."""
    global _version
    if _version is None:
        h = hashlib.sha256()
        here = Path(__file__).parent
        for name in _VERIFIER_SOURCES:
            h.update(name.encode() + b"\0" + (here / name).read_bytes())
        h.update(b"_C\0" + _C.plan.VERIFIER_CPP_DIGEST.encode())
        _version = h.hexdigest()[:16]
    return _version


def cache_dir() -> Path:
    """Where proofs are recorded: $XDG_CACHE_HOME/forestcc/verified, else
    ~/.cache/forestcc/verified. A record is a file named <sha256 of the plan>-<verifier
    version>; whoever can write there can vouch for a plan, as for any user-owned cache."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "forestcc" / "verified"


def _record_path(digest: str) -> Path:
    return cache_dir() / f"{digest}-{verifier_version()}"


def _read_record(digest: str):
    """(outcome, messages) recorded for this content, or None. "Too large to prove" holds only
    for the limits it was found under."""
    try:
        record = json.loads(_record_path(digest).read_text(encoding="utf-8"))
        outcome, errors = record["outcome"], [str(e) for e in record.get("errors", [])]
        if outcome == STATIC_ONLY and record.get("limits") != [MAX_WORK, MAX_MEMORY]:
            return None
        return outcome, errors
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_record(digest: str, outcome: str, errors=()) -> None:
    """Records an outcome atomically (a temporary file renamed); a cache that cannot be written
    only costs the next job a proof."""
    path = _record_path(digest)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"outcome": outcome, "errors": list(errors),
                       "limits": [MAX_WORK, MAX_MEMORY]}, f)
        os.replace(tmp, path)
    except OSError:
        pass


def record_proof(text: bytes | str) -> None:
    """Records that a plan file of exactly this content verified (a generator that verified
    what it writes calls this), so loading it skips the proof whatever its size."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    digest = hashlib.sha256(data).hexdigest()
    _write_record(digest, PROVEN)
    _seen.pop(digest, None)


class _Lock:
    """An exclusive lock on the record being made, so that the ranks of a node prove a plan
    once: the first verifies, the others wait and read its record. flock is released when its
    holder exits, even by a crash. Without a writable cache there is no lock."""

    def __init__(self, digest: str):
        self.path = cache_dir() / f".{digest}-{verifier_version()}.lock"
        self.fd = None

    def __enter__(self):
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:
            if self.fd is not None:
                os.close(self.fd)
            self.fd = None
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # releases the lock; the lock file stays for the next waiter


def _refusal(source: str, errors) -> plan_format.PlanError:
    head = (f"{source}: refused before running: the plan does not pass forestcc's verifier "
            f"(run `forestcc plan verify {source}` for the full report)")
    return plan_format.PlanError([head] + [f"{source}: {e}" for e in errors])


def _prove(plan: dict, source: str):
    """(outcome, errors) of the static checks and, where it fits, the full proof."""
    issues = verifier.balance_issues(plan)
    if issues:
        return REFUSED, [str(i) for i in issues]
    try:
        result = verifier.verify(plan, name=source, max_work=MAX_WORK, max_memory=MAX_MEMORY,
                                 validated=True)
    except verifier.TooLarge:
        return STATIC_ONLY, []
    if not result.ok:
        return REFUSED, [str(i) for i in result.issues]
    return PROVEN, []


def load_proven(path) -> dict:
    """A plan file's dict after the checks of the module docstring; PlanError naming the file
    when it cannot be read, is not a valid plan, does not verify or is too large to prove with
    no proof on record."""
    source = os.fspath(path)
    data = plan_format.read_bytes(path)
    plan = plan_format.loads(data, source)  # linear; the caller compiles once per file version
    _admit(data, plan, source, f"run `forestcc plan verify {source}` once: it proves a plan of any "
                               f"size and records the proof for every later run")
    return plan


def proven_dict(plan: dict, source: str = "<algo dict>") -> dict:
    """A plan dict, validated, after the same checks as a file (proven by the content of its
    canonical text, ``dumps``); PlanError naming ``source`` as load_proven's."""
    plan = plan_format.validate(plan, source)
    data = plan_format.dumps(plan).encode("utf-8")
    _admit(data, plan, source, "verify it once with forestcc.plan.verify(plan) and, when it passes, "
                               "record the proof with forestcc.plan.proof.record_proof(forestcc.plan.dumps(plan))")
    return plan


def _admit(data: bytes, plan: dict, source: str, how_to_prove: str) -> None:
    """Raises unless the plan of these bytes was proven (here, on record, or now)."""
    digest = hashlib.sha256(data).hexdigest()
    outcome_errors = _seen.get(digest)
    if outcome_errors is None:
        outcome_errors = _read_record(digest)
        if outcome_errors is None:
            with _Lock(digest):
                outcome_errors = _read_record(digest)  # another rank may have proven it meanwhile
                if outcome_errors is None:
                    outcome_errors = _prove(plan, source)
                    _write_record(digest, *outcome_errors)
        _seen[digest] = outcome_errors
    outcome, errors = outcome_errors
    if outcome == REFUSED:
        raise _refusal(source, errors)
    if outcome != PROVEN:  # STATIC_ONLY (or a record this version does not know)
        raise plan_format.PlanError([
            f"{source}: refused before running: too large to prove at load (more than {MAX_WORK:,} work "
            f"units or {MAX_MEMORY:,} bytes of the verifier's), and no proof of this exact content is on "
            f"record; {how_to_prove}"])


def plan_status(path) -> str | None:
    """How the file's content was checked when this process loaded it (PROVEN or STATIC_ONLY),
    None when it was not loaded or was refused. For tests and diagnostics."""
    try:
        digest = hashlib.sha256(plan_format.read_bytes(path)).hexdigest()
    except plan_format.PlanError:
        return None
    outcome = _seen.get(digest, (None,))[0]
    return None if outcome == REFUSED else outcome
