"""Runs generated plan files (forest plans) through the collectives API and checks the results
against numpy.

argv: COUNTS SPEC...
  COUNTS: comma-separated element counts (per rank for all_gather, the vector for all_reduce)
  SPEC:   COLLECTIVE:LAYOUT:PATH with COLLECTIVE all_gather or all_reduce, LAYOUT in_place or
          out_of_place (what the plan file was generated for)
Prints "CHECKED n" and one "FAIL ..." line per mismatch; exits 1 on any failure.
"""
import sys

import numpy as np

import forestcc

counts = [int(c) for c in sys.argv[1].split(",")]
specs = [spec.split(":", 2) for spec in sys.argv[2:]]

comm = forestcc.init()
N, R = comm.size, comm.rank


def data(rank, count, salt):
    """Small integers stored as float32, so every sum is exact whatever the order."""
    i = np.arange(count, dtype=np.int64)
    return ((i * 5 + rank * 11 + salt) % 13 - 6).astype(np.float32)


checked = 0
failures = []
for salt, (collective, layout, path) in enumerate(specs):
    for count in counts:
        where = f"{collective} {layout} count={count} plan={path}"
        try:
            if collective == "all_gather":
                want = np.concatenate([data(q, count, salt) for q in range(N)])
                out = np.full(N * count, np.nan, dtype=np.float32)
                if layout == "in_place":
                    x = out[R * count:(R + 1) * count]
                    x[...] = data(R, count, salt)
                else:
                    x = data(R, count, salt)
                comm.all_gather(out, x, algo=path)
                got = out
            elif collective == "all_reduce":
                want = sum(data(q, count, salt).astype(np.float64) for q in range(N))
                x = data(R, count, salt)
                if layout == "in_place":
                    got = comm.all_reduce(x, algo=path)
                else:
                    got = np.full(count, np.nan, dtype=np.float32)
                    comm.all_reduce(x, out=got, algo=path)
            else:
                raise ValueError(f"unknown collective {collective!r}")
        except Exception as err:  # noqa: BLE001 - reported and counted as a failure
            failures.append(f"{where}: {type(err).__name__}: {err}")
            continue
        got = np.asarray(got, dtype=np.float64)
        bad = np.flatnonzero(got != np.asarray(want, dtype=np.float64))
        if bad.size:
            failures.append(f"{where}: {bad.size} wrong elements, first at {bad[0]}: "
                            f"got {got[bad[0]]}, want {want[bad[0]]}")
        checked += 1

for failure in failures:
    print("FAIL", failure)
print("CHECKED", checked, "FAILURES", len(failures))
sys.exit(1 if failures else 0)
