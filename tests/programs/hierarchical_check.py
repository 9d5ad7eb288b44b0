"""Runs plan files of the hierarchical and 2dh generators (dumped for a node layout, run here on
one node) through the collectives API, every dtype and reduction op, in and out of place, and
checks the results against numpy.

argv: COUNTS SPEC...
  COUNTS: comma-separated element counts per block
  SPEC:   COLLECTIVE:LAYOUT:PATH, COLLECTIVE all_reduce, all_gather, reduce_scatter, all_to_all
          or all_to_all_v, LAYOUT in_place or out_of_place (what the plan was generated for).
          all_to_all_v runs random splits (some zero; the same on every rank from a fixed seed)
          through PATH (2dh plans size their scratch from the counts: scratch_blocks) and
          through algo="auto". all_to_all_v_refused: PATH (a plan with scratch but no
          scratch_blocks) must be refused naming scratch_blocks; all_to_all_v_broken: PATH (wrong
          scratch_blocks) must give the right answer or an error, and an error at least once.
Prints "CHECKED n FAILURES f" and one "FAIL ..." line per mismatch; exits 1 on any failure.
"""
import sys

import ml_dtypes
import numpy as np

import forestcc

DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16,
          ml_dtypes.bfloat16, np.float32, np.float64]
OPS = ["sum", "prod", "min", "max", "avg"]

counts = [int(c) for c in sys.argv[1].split(",")]
broken_errors = 0
specs = [spec.split(":", 2) for spec in sys.argv[2:]]
comm = forestcc.init()
N, R = comm.size, comm.rank
checked, failures = 0, []


def data(rank, count, dtype, op="sum", salt=0):
    """Small values: sums and products stay exact in every dtype (prod: 1 or 2 per rank)."""
    i = np.arange(count, dtype=np.int64)
    if op == "prod":
        v = (i * 7 + rank * 3 + salt) % 2 + 1
    else:
        v = (i * 5 + rank * 11 + salt) % 13
        if np.dtype(dtype).kind in "fV":
            v = v - 6
    return v.astype(dtype)


def reduced(arrays, op, dtype):
    stack = np.stack(arrays)
    kind = np.dtype(dtype).kind
    if op in ("sum", "avg", "prod"):
        acc = np.float64 if kind in "fV" else dtype
        r = (np.prod if op == "prod" else np.sum)(stack.astype(acc), axis=0, dtype=acc)
        if op == "avg":
            r = np.where(r < 0, -((-r) // N), r // N) if kind in "iu" else r / N
        return r.astype(dtype)
    return (np.min if op == "min" else np.max)(stack, axis=0)


def check(label, got, want, dtype):
    global checked
    checked += 1
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    tol = 0 if np.dtype(dtype).kind in "iu" else {2: 2e-2, 4: 1e-5, 8: 1e-12}[np.dtype(dtype).itemsize]
    if got64.shape != want64.shape or not np.allclose(got64, want64, rtol=tol, atol=tol):
        bad = np.flatnonzero(got64 != want64) if got64.shape == want64.shape else []
        failures.append(f"{label}: {len(bad)} wrong elements, first at {list(bad[:5])}")


def run(collective, in_place, path, dtype, c):
    global broken_errors
    if in_place and c == 0:
        return  # empty buffers cannot alias: such a call is out of place
    name = np.dtype(dtype).name
    if collective in ("all_reduce", "reduce_scatter"):
        for op in OPS:
            blocks = N if collective == "reduce_scatter" else 1
            ins = [data(q, c * blocks, dtype, op) for q in range(N)]
            want = reduced(ins, op, dtype)
            if collective == "reduce_scatter":
                want = want[R * c:(R + 1) * c]
                x = ins[R].copy()
                if in_place:
                    comm.reduce_scatter(x[R * c:(R + 1) * c], x, op=op, algo=path)
                    got = x[R * c:(R + 1) * c]
                else:
                    got = np.zeros(c, dtype)
                    comm.reduce_scatter(got, x, op=op, algo=path)
            else:
                x = ins[R].copy()
                got = x if in_place else np.zeros(c, dtype)
                comm.all_reduce(x, out=None if in_place else got, op=op, algo=path)
            check(f"{collective} {op} {name} c={c} {path}", got, want, dtype)
    elif collective == "all_gather":
        want = np.concatenate([data(q, c, dtype) for q in range(N)])
        out = np.zeros(N * c, dtype)
        x = out[R * c:(R + 1) * c] if in_place else data(R, c, dtype)
        x[...] = data(R, c, dtype)
        comm.all_gather(out, x, algo=path)
        check(f"all_gather {name} c={c} {path}", out, want, dtype)
    elif collective == "all_to_all":
        ins = [data(q, c * N, dtype, salt=q) for q in range(N)]
        want = np.concatenate([ins[q][R * c:(R + 1) * c] for q in range(N)])
        x = ins[R].copy()
        out = x if in_place else np.zeros(c * N, dtype)
        comm.all_to_all(out, x, algo=path)
        check(f"all_to_all {name} c={c} {path}", out, want, dtype)
    elif collective == "all_to_all_v":
        rng = np.random.default_rng(c)  # the same splits on every rank
        splits = rng.integers(0, 2 * c + 1, size=(N, N)) * (rng.random((N, N)) > 0.25)
        ins = [data(q, int(splits[q].sum()), dtype, salt=q) for q in range(N)]
        want = np.concatenate([ins[q][int(splits[q, :R].sum()):][:int(splits[q, R])] for q in range(N)])
        for algo in (path, "auto"):
            out = np.zeros(int(splits[:, R].sum()), dtype)
            comm.all_to_all_v(out, ins[R], splits[:, R].tolist(), splits[R].tolist(), algo=algo)
            check(f"all_to_all_v {name} c={c} {algo}", out, want, dtype)
    elif collective in ("all_to_all_v_refused", "all_to_all_v_broken"):
        rng = np.random.default_rng(c)
        splits = rng.integers(1, 2 * c + 2, size=(N, N))
        ins = [data(q, int(splits[q].sum()), dtype, salt=q) for q in range(N)]
        want = np.concatenate([ins[q][int(splits[q, :R].sum()):][:int(splits[q, R])] for q in range(N)])
        out = np.zeros(int(splits[:, R].sum()), dtype)
        try:
            comm.all_to_all_v(out, ins[R], splits[:, R].tolist(), splits[R].tolist(), algo=path)
        except (forestcc.ForestccError, ValueError) as error:
            if collective == "all_to_all_v_refused" and "scratch_blocks" not in str(error):
                raise
            broken_errors += 1
            return
        if collective == "all_to_all_v_refused":
            raise AssertionError("a plan with scratch but no scratch_blocks ran all_to_all_v")
        check(f"{collective} {name} c={c}", out, want, dtype)


for collective, layout, path in specs:
    for dtype in DTYPES:
        for c in counts:
            try:
                run(collective, layout == "in_place", path, dtype, c)
            except Exception as error:  # noqa: BLE001 - reported and counted
                failures.append(f"{collective} {layout} {np.dtype(dtype).name} c={c}: "
                                f"{type(error).__name__}: {error}")

if any(spec[0] == "all_to_all_v_broken" for spec in specs) and not broken_errors:
    failures.append("all_to_all_v_broken: the wrong scratch_blocks never raised")
for failure in failures:
    print("FAIL", failure)
print("CHECKED", checked, "FAILURES", len(failures))
sys.exit(1 if failures else 0)
