"""--plot busbw.png: bus bandwidth against message size, one line per backend and algorithm
(and per datatype/op/root when several were run). Out-of-place solid, in-place dashed."""
from __future__ import annotations

from typing import Any

MATPLOTLIB_HINT = "pip install matplotlib"


class PlotUnavailable(Exception):
    pass


def require_matplotlib() -> None:
    """Fail before the benchmark runs rather than after it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotUnavailable(f"--plot needs matplotlib: {MATPLOTLIB_HINT}") from None


def plot_busbw(results: dict[str, Any], path: str) -> None:
    require_matplotlib()
    import matplotlib
    matplotlib.use("Agg")   # files only: no display on compute nodes
    import matplotlib.pyplot as plt

    rows = results["rows"]
    # the distinguishing parts of a line's label: only what actually varies in this run
    varying = [k for k in ("type", "redop", "root") if len({r[k] for r in rows}) > 1]
    lines: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        label = r["backend"] + (f" ({r['algo']})" if r["algo"] else "")
        label += "".join(f" {r[k]}" for k in varying)
        lines.setdefault(label, []).append(r)

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (label, line_rows) in enumerate(lines.items()):
        color = f"C{i % 10}"
        for placement, style, suffix in (("out_of_place", "-", ""), ("in_place", "--", " in-place")):
            points = sorted((r["size"], r[placement]["busbw_gbps"]) for r in line_rows
                            if r[placement] is not None and r["size"] > 0)
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, style, color=color, marker="o", markersize=3,
                        label=label + suffix)
    env = results["environment"]
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"{results['collective']}, {env['nranks']} ranks")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
