"""The built-in plan generators (C++, ``forestcc._C.plan``): ring, direct, direct_small,
halving_doubling, bruck, pairwise, tree and eager for any rank count, and hierarchical and 2dh,
which follow a node layout.

    from forestcc.plan import builtin
    plan = builtin.generate("ring", "all_reduce", 8)            # a format-v1 dict
    plan = builtin.generate("2dh", "all_to_all", 6, nodes=[0, 0, 0, 1, 1, 1])
    builtin.algorithms()        # {"ring": ("all_reduce", ...), ...}

The plans are exactly what ``forestcc.plan.load`` returns for the same JSON, so they can be
saved, verified and simulated like any plan file. What each algorithm does and costs is in
schedules/README.md ("Built-in generators"). Unlike the rest of forestcc.plan this module needs
the native module.
"""
from __future__ import annotations

from . import ops

__all__ = ["algorithms", "generate", "parse_nodes", "requests", "summary", "uses_nodes"]


def _native():
    from forestcc import _C
    return _C.plan


def algorithms() -> dict[str, tuple[str, ...]]:
    """Built-in algorithm name -> the collectives it implements, in registry order."""
    return {name: tuple(collectives) for name, collectives in _native().algorithms()}


def summary(algo: str) -> str:
    """A one-line description of a built-in algorithm ("" for an unknown name)."""
    return _native().algorithm_summary(algo)


def uses_nodes(algo: str) -> bool:
    """Whether the algorithm's plans follow the node layout (hierarchical, 2dh); the others
    are the same on every layout."""
    return _native().algorithm_uses_nodes(algo)


def generate(algo: str, collective: str, nranks: int, root: int | None = None,
             in_place: bool = False, nodes=None) -> dict:
    """The plan of a built-in algorithm as a format-v1 dict.

    root: rooted collectives only (broadcast, reduce, gather, scatter); None means rank 0.
    nodes: the node of every rank (nranks labels, any non-negative ints; renumbered by first
    appearance) for the algorithms that follow the node layout; None means one node.
    Raises ValueError naming the problem for an unknown algorithm or collective, a collective
    the algorithm does not implement, nranks < 1, a root out of range (or given to a
    collective that takes none), or a node layout of the wrong length or with a negative node.
    """
    if isinstance(nranks, bool) or not isinstance(nranks, int):
        raise TypeError(f"nranks must be an int, got {type(nranks).__name__}")
    if root is not None and (isinstance(root, bool) or not isinstance(root, int)):
        raise TypeError(f"root must be an int or None, got {type(root).__name__}")
    nodes = [] if nodes is None else list(nodes)
    if any(isinstance(x, bool) or not isinstance(x, int) for x in nodes):
        raise TypeError(f"nodes must be a list of ints, got {nodes!r}")
    return _native().generate(algo, collective, nranks, root=root, in_place=bool(in_place),
                              nodes=nodes)


def parse_nodes(text: str) -> list[int]:
    """A node layout from the command line: ``0,0,1,1`` (the node of each rank) or ``NxR``
    (N nodes of R ranks, numbered node by node: ``3x2`` is 0,0,1,1,2,2; hosts x ranks, as
    forestcc-cluster counts). Raises ValueError."""
    text = text.strip()
    if "x" in text:
        count, _, per = text.partition("x")
        try:
            nodes, per_node = int(count), int(per)
        except ValueError:
            raise ValueError(f"--nodes {text!r}: expected NODESxRANKS such as 3x2, or the node "
                             f"of every rank such as 0,0,1,1") from None
        if per_node < 1 or nodes < 1:
            raise ValueError(f"--nodes {text!r}: nodes and ranks per node must be >= 1")
        return [r // per_node for r in range(per_node * nodes)]
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--nodes {text!r}: expected the node of every rank such as 0,0,1,1, "
                         f"or NODESxRANKS such as 3x2") from None


def requests(algo: str, nranks: int, collective: str | None = None, root: int | None = None,
             in_place: bool | None = None, nodes=None) -> list[dict]:
    """The generate() arguments that cover an algorithm: every collective it implements (or just
    `collective`), in and out of place (or just `in_place`), and for rooted collectives the
    given root or the roots 0, N/2 and N-1, on the node layout `nodes` (None: one node). Each
    item is a dict of keyword arguments."""
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
                            "in_place": mode, "nodes": nodes})
    return out
