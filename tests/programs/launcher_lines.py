"""Writes many long lines to stdout and stderr in several raw writes per line, as an unbuffered
program does; test_launcher.py recomputes every line that must come out (keep line() in step).

argv: number of lines per stream. Phase "b": every rank writes the first half of a line, all
ranks meet in a barrier, then each writes the second half; so, without whole-line relaying, every
such line is cut by the other ranks' halves. Phase "f": lines in three writes, no waiting.
Last, a line without a newline."""
import os
import sys

import forestcc

comm = forestcc.init()
rank, count = comm.rank, int(sys.argv[1])


def line(phase: str, stream: str, i: int) -> bytes:
    fill = bytes([65 + rank % 26]) * (1000 + 37 * i % 4000)
    return f"{rank}:{phase}:{stream}:{i}:".encode() + fill


for i in range(20):
    text = line("b", "out", i) + b"\n"
    os.write(1, text[:len(text) // 2])
    comm.barrier()
    os.write(1, text[len(text) // 2:])
for i in range(count):
    for fd, stream in ((1, "out"), (2, "err")) if i % 4 == 0 else ((1, "out"),):
        text = line("f", stream, i) + b"\n"
        third = len(text) // 3
        os.write(fd, text[:third])
        os.write(fd, text[third:2 * third])
        os.write(fd, text[2 * third:])
comm.barrier()
os.write(1, f"END {rank}".encode())
