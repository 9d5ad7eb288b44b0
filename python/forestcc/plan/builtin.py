"""The built-in plan generators (C++, ``forestcc._C.plan``): ring, direct, direct_small,
halving_doubling, bruck, pairwise and tree, for any rank count.

    from forestcc.plan import builtin
    plan = builtin.generate("ring", "all_reduce", 8)            # a format-v1 dict
    builtin.algorithms()        # {"ring": ("all_reduce", ...), ...}

The plans are exactly what ``forestcc.plan.load`` returns for the same JSON, so they can be
saved, verified and simulated like any plan file. What each algorithm does and costs is in
schedules/README.md ("Built-in generators"). Unlike the rest of forestcc.plan this module needs
the native module.
"""
from __future__ import annotations

from . import ops

__all__ = ["algorithms", "generate", "requests", "summary"]


def _native():
    from forestcc import _C
    return _C.plan


def algorithms() -> dict[str, tuple[str, ...]]:
    """Built-in algorithm name -> the collectives it implements, in registry order."""
    return {name: tuple(collectives) for name, collectives in _native().algorithms()}


def summary(algo: str) -> str:
    """A one-line description of a built-in algorithm ("" for an unknown name)."""
    return _native().algorithm_summary(algo)


def generate(algo: str, collective: str, nranks: int, root: int | None = None,
             in_place: bool = False) -> dict:
    """The plan of a built-in algorithm as a format-v1 dict.

    root: rooted collectives only (broadcast, reduce, gather, scatter); None means rank 0.
    Raises ValueError naming the problem for an unknown algorithm or collective, a collective
    the algorithm does not implement, nranks < 1, or a root out of range (or given to a
    collective that takes none).
    """
    if isinstance(nranks, bool) or not isinstance(nranks, int):
        raise TypeError(f"nranks must be an int, got {type(nranks).__name__}")
    if root is not None and (isinstance(root, bool) or not isinstance(root, int)):
        raise TypeError(f"root must be an int or None, got {type(root).__name__}")
    return _native().generate(algo, collective, nranks, root=root, in_place=bool(in_place))


def requests(algo: str, nranks: int, collective: str | None = None, root: int | None = None,
             in_place: bool | None = None) -> list[dict]:
    """The generate() arguments that cover an algorithm: every collective it implements (or just
    `collective`), in and out of place (or just `in_place`), and for rooted collectives the
    given root or the roots 0, N/2 and N-1. Each item is a dict of keyword arguments."""
    supported = algorithms()
    if algo not in supported:
        raise ValueError(f"unknown algorithm {algo!r} (built-in algorithms: "
                         f"{', '.join(supported)})")
    collectives = supported[algo] if collective is None else (collective,)
    modes = (False, True) if in_place is None else (bool(in_place),)
    out = []
    for name in collectives:
        if name in ops.ROOTED_COLLECTIVES:
            roots = [root] if root is not None else sorted({0, nranks // 2, max(nranks - 1, 0)})
        else:  # an explicit root for an unrooted collective is refused by generate()
            roots = [root if collective is not None else None]
        for mode in modes:
            for r in roots:
                out.append({"algo": algo, "collective": name, "nranks": nranks, "root": r,
                            "in_place": mode})
    return out
