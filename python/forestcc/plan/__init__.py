"""Plans: collectives as per-rank programs of one-sided operations, stored as JSON (format v1).

- ``load``/``loads``/``save``/``dumps``/``validate``: the file format (format.py)
- ``PlanBuilder``: compose plans in Python (builder.py)
- ``verify``: prove a plan deadlock-free, race-free and correct (verifier.py)
- ``proof.load_proven``: what running a plan file checks first (proof.py: the verifier, bounded,
  remembered per file content)
- ``geometry`` and ``semantics``: what chunks are and what each collective must produce
- ``reference``: small known-good plans for every collective
- ``bulk.paused_gc``: the cyclic garbage collector paused while plans of millions of objects are
  compiled, loaded or verified

Loading and validation run in the C++ plan loader (forestcc._C.plan); the rest is Python.
"""
from __future__ import annotations

from .builder import PlanBuilder
from .format import PlanError, dumps, load, loads, save, validate, validation_errors
from .verifier import Issue, VerifyResult, verify

__all__ = [
    "Issue", "PlanBuilder", "PlanError", "VerifyResult", "dumps", "load", "loads", "save",
    "validate", "validation_errors", "verify",
]
