"""The nccl-tests table: preamble, three header lines, one row per size, footer.

Rows keep nccl-tests' columns so existing parsers read them: whitespace-separated size, count,
type, redop, root, then time/algbw/busbw/#wrong out of place and in place ("N/A" where not
measured or not checked). With --compare, ratio columns (this backend's busbw / the peer's)
follow the 13 standard ones.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

HEADER_LINES = (
    ("#                                                              out-of-place"
     "                       in-place"),
    ("#       size         count      type   redop    root     time   algbw   busbw  #wrong"
     "     time   algbw   busbw  #wrong"),
    ("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        "
     "     (us)  (GB/s)  (GB/s)"),
)
_RATIO_WIDTH = 12


@dataclass
class Measurement:
    """One placement (out-of-place or in-place) of one row."""
    time_us: float
    algbw: float
    busbw: float
    wrong: int | None     # None: not checked


@dataclass
class Row:
    backend: str
    algo: str | None
    size: int
    count: int
    dtype: str
    redop: str
    root: int
    out_of_place: Measurement | None   # None: this backend cannot do it
    in_place: Measurement | None

    def measurements(self) -> list[Measurement]:
        return [m for m in (self.out_of_place, self.in_place) if m is not None]


def header_lines(peers: Sequence[str] = ()) -> list[str]:
    lines = list(HEADER_LINES)
    if peers:
        lines[0] += "  busbw ratio: this / peer".rjust(_RATIO_WIDTH * 2 * len(peers))
        lines[1] += "".join(f"{p + ' oop':>{_RATIO_WIDTH}}{p + ' ip':>{_RATIO_WIDTH}}"
                            for p in peers)
    return lines


def _number(value: float, width: int) -> str:
    # two decimals like nccl-tests; very large values drop them rather than break alignment
    text = f"{value:.2f}" if value < 10 ** (width - 3) else f"{value:.0f}"
    return f"{text:>{width}}"


def _placement(m: Measurement | None) -> str:
    if m is None:
        return f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
    wrong = "N/A" if m.wrong is None else str(m.wrong)
    return f"  {_number(m.time_us, 7)}  {_number(m.algbw, 6)}  {_number(m.busbw, 6)}  {wrong:>6}"


def ratio(mine: Measurement | None, peer: Measurement | None) -> float | None:
    if mine is None or peer is None or mine.busbw <= 0 or peer.busbw <= 0:
        return None
    return mine.busbw / peer.busbw


def format_row(row: Row, peer_rows: Sequence[Row] = ()) -> str:
    text = (f"{row.size:>12}  {row.count:>12}  {row.dtype:>8}  {row.redop:>6}  {row.root:>6}"
            + _placement(row.out_of_place) + _placement(row.in_place))
    for peer in peer_rows:
        for mine, theirs in ((row.out_of_place, peer.out_of_place),
                             (row.in_place, peer.in_place)):
            r = ratio(mine, theirs)
            text += f"{'N/A' if r is None else f'{r:.2f}':>{_RATIO_WIDTH}}"
    return text


def average_busbw(rows: Sequence[Row]) -> float:
    """Mean busbw over every measured placement of every row (nccl-tests' footer number)."""
    values = [m.busbw for row in rows for m in row.measurements()]
    return sum(values) / len(values) if values else 0.0


def total_wrong(rows: Sequence[Row]) -> int:
    return sum(m.wrong or 0 for row in rows for m in row.measurements())


def footer_lines(binary: str, rows: Sequence[Row], peer_rows: dict[str, list[Row]]) -> list[str]:
    wrong = total_wrong(rows) + sum(total_wrong(r) for r in peer_rows.values())
    lines = [f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
             f"# Avg bus bandwidth    : {average_busbw(rows):g} "]
    for peer, prow in peer_rows.items():
        lines.append(f"# Avg bus bandwidth ({peer}) : {average_busbw(prow):g} ")
    lines += ["#", f"# Collective test concluded: {binary}"]
    return lines
