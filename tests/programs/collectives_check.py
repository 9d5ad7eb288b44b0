"""Every collective x dtype x op x layout (in place / out of place) x size on this rank, against
a numpy reference computed from every rank's (deterministic) input.

argv: ALGOS SIZES [--memory numpy|forestcc]
  ALGOS: comma-separated algorithm names, "auto", or "all" (auto + every built-in that supports
         the collective); SIZES: comma-separated element counts per block.
  --reduction-sizes: more counts, for all_reduce / reduce_scatter / reduce only (4099: the
         reduction kernels work in tiles of 2048 elements, which smaller counts never fill).
  --corrupt: a test of the checker itself: every result of two or more elements gets one wrong
         element, never element 0, before it is compared; then FAILURES must equal CORRUPTED.
Prints "CHECKED n FAILURES f" (and "CORRUPTED c") and one "FAIL ..." line per mismatch; exits 1
on any failure.
"""
import argparse
import sys

import ml_dtypes
import numpy as np

import forestcc
from forestcc import _C

FP8 = (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)
DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16,
          ml_dtypes.bfloat16, np.float32, np.float64, *FP8]
OPS = ["sum", "prod", "min", "max", "avg"]

parser = argparse.ArgumentParser()
parser.add_argument("algos")
parser.add_argument("sizes")
parser.add_argument("--memory", default="numpy", choices=["numpy", "forestcc"])
parser.add_argument("--dtypes", default="all")
parser.add_argument("--collectives", default="all")
parser.add_argument("--algo-dtypes", default="all",
                    help="dtypes that run every algorithm of ALGOS; the others run 'auto' only")
parser.add_argument("--reduction-sizes", default="")
parser.add_argument("--corrupt", action="store_true")
args = parser.parse_args()

comm = forestcc.init()
N, R = comm.size, comm.rank
SIZES = [int(s) for s in args.sizes.split(",")]
REDUCTION_SIZES = [int(s) for s in args.reduction_sizes.split(",") if s]
dtypes = DTYPES if args.dtypes == "all" else [getattr(ml_dtypes, d, None) or np.dtype(d).type
                                              for d in args.dtypes.split(",")]
supported = {name: set(colls) for name, colls in _C.plan.algorithms()}
checked = 0
corrupted = 0
failures = []


def algos_for(collective):
    if args.algo_dtypes != "all" and current_dtype not in args.algo_dtypes.split(","):
        return ["auto"]
    if args.algos == "all":
        return ["auto"] + sorted(a for a, c in supported.items() if collective in c)
    return [a for a in args.algos.split(",") if a == "auto" or collective in supported.get(a, ())]


def alloc(count, dtype):
    if args.memory == "forestcc":
        return forestcc.empty(count, dtype=dtype)
    return np.empty(count, dtype=dtype)


def data(rank, count, dtype, op=None, salt=0):
    """Rank `rank`'s input for `op` (None: data movement): small values so sums and products stay
    exact in every dtype. fp8 holds the integers up to 16 (e4m3) or 8 (e5m2) exactly and a ring
    rounds every partial sum: its sums add -1, 0 and 1, its products signed powers of two."""
    i = np.arange(count, dtype=np.int64)
    fp8 = dtype in FP8
    if op == "prod":
        v = np.array([1, 2, -1, -2])[(i * 7 + rank * 3 + salt) % 4] if fp8 else (i * 7 + rank * 3 + salt) % 3 + 1
    elif fp8 and op in ("sum", "avg"):
        v = (i * 5 + rank * 11 + salt) % 3 - 1
    else:
        v = (i * 5 + rank * 11 + salt) % 13
        if np.dtype(dtype).kind in "if" or dtype is ml_dtypes.bfloat16 or fp8:
            v = v - 6
    out = alloc(count, dtype)
    out[...] = v.astype(dtype)
    return out


def reference(stack, op, dtype):
    kind = np.dtype(dtype).kind
    if op in ("sum", "avg", "prod"):
        acc = np.float64 if kind in "fV" else dtype
        f = np.sum if op != "prod" else np.prod
        r = f(stack.astype(acc), axis=0, dtype=acc)
        if op == "avg":
            if kind in "iu":
                r = np.where(r < 0, -((-r) // N), r // N).astype(dtype)
            else:
                r = r / N
        return r.astype(dtype)
    return (np.min if op == "min" else np.max)(stack, axis=0)


def same(got, want, dtype):
    kind = np.dtype(dtype).kind
    if kind in "iu":
        return np.array_equal(np.asarray(got), np.asarray(want))
    tol = {1: 0, 2: 2e-2, 4: 1e-5, 8: 1e-12}[np.dtype(dtype).itemsize]  # fp8: exact (see data)
    return np.allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64),
                       rtol=tol, atol=tol)


def corrupt(got, want, dtype):
    """A copy of `got` with one element wrong: the last, the middle or the second, in turn."""
    global corrupted
    got = np.array(got, copy=True)
    i = [got.size - 1, got.size // 2, 1][corrupted % 3]
    corrupted += 1
    if np.dtype(dtype).kind in "iu":
        got[i] = np.asarray(want)[i] ^ 1
    else:
        w = float(np.asarray(want)[i])
        got[i] = w + max(1.0, abs(w))  # off by more than any tolerance
    return got


def check(label, got, want, dtype):
    global checked
    checked += 1
    if args.corrupt and np.asarray(got).size >= 2:
        got = corrupt(got, want, dtype)
    if not same(got, want, dtype):
        bad = np.flatnonzero(np.asarray(got, dtype=np.float64) != np.asarray(want, dtype=np.float64))
        failures.append(f"{label}: {len(bad)} wrong elements, first at {bad[:5].tolist()}: "
                        f"got {np.asarray(got)[bad[:3]].tolist()} want {np.asarray(want)[bad[:3]].tolist()}")


def enabled(name):
    return args.collectives == "all" or name in args.collectives.split(",")


current_dtype = "float32"
for dtype in dtypes:
    dn = current_dtype = np.dtype(dtype).name
    for c in sorted(set(SIZES) | set(REDUCTION_SIZES)):
        # all_reduce / reduce_scatter / reduce: every op
        for op in OPS:
            if enabled("all_reduce"):
                for algo in algos_for("all_reduce"):
                    stack = np.stack([data(r, c, dtype, op) for r in range(N)]) if N else None
                    want = reference(stack, op, dtype)
                    x = data(R, c, dtype, op)
                    comm.all_reduce(x, op=op, algo=algo)
                    check(f"all_reduce in-place {algo} {dn} {op} c={c}", x, want, dtype)
                    x = data(R, c, dtype, op)
                    out = alloc(c, dtype)
                    comm.all_reduce(x, op=op, out=out, algo=algo)
                    check(f"all_reduce {algo} {dn} {op} c={c}", out, want, dtype)
                    check(f"all_reduce input intact {algo} {dn} {op} c={c}", x, data(R, c, dtype, op), dtype)
            if enabled("reduce_scatter"):
                for algo in algos_for("reduce_scatter"):
                    stack = np.stack([data(r, c * N, dtype, op) for r in range(N)])
                    want = reference(stack, op, dtype)[R * c:(R + 1) * c]
                    x = data(R, c * N, dtype, op)
                    out = alloc(c, dtype)
                    comm.reduce_scatter(out, x, op=op, algo=algo)
                    check(f"reduce_scatter {algo} {dn} {op} c={c}", out, want, dtype)
                    x = data(R, c * N, dtype, op)
                    comm.reduce_scatter(x[R * c:(R + 1) * c], x, op=op, algo=algo)
                    check(f"reduce_scatter in-place {algo} {dn} {op} c={c}", x[R * c:(R + 1) * c], want, dtype)
            if enabled("reduce"):
                for algo in algos_for("reduce"):
                    for root in sorted({0, N - 1}):
                        stack = np.stack([data(r, c, dtype, op) for r in range(N)])
                        want = reference(stack, op, dtype)
                        x = data(R, c, dtype, op)
                        out = alloc(c, dtype)
                        comm.reduce(x, root, op=op, out=out, algo=algo)
                        if R == root:
                            check(f"reduce root={root} {algo} {dn} {op} c={c}", out, want, dtype)
                        check(f"reduce input intact root={root} {algo} {dn} {op} c={c}", x, data(R, c, dtype, op), dtype)
                        x = data(R, c, dtype, op)
                        comm.reduce(x, root, op=op, algo=algo)
                        if R == root:
                            check(f"reduce in-place root={root} {algo} {dn} {op} c={c}", x, want, dtype)
        if c not in SIZES:
            continue
        # data movement: ops do not apply
        if enabled("all_gather"):
            for algo in algos_for("all_gather"):
                want = np.concatenate([data(r, c, dtype) for r in range(N)])
                out = alloc(c * N, dtype)
                comm.all_gather(out, data(R, c, dtype), algo=algo)
                check(f"all_gather {algo} {dn} c={c}", out, want, dtype)
                out = alloc(c * N, dtype)
                out[R * c:(R + 1) * c] = data(R, c, dtype)
                comm.all_gather(out, out[R * c:(R + 1) * c], algo=algo)
                check(f"all_gather in-place {algo} {dn} c={c}", out, want, dtype)
        if enabled("all_to_all"):
            for algo in algos_for("all_to_all"):
                ins = [data(r, c * N, dtype, salt=1) for r in range(N)]
                want = np.concatenate([ins[b][R * c:(R + 1) * c] for b in range(N)])
                out = alloc(c * N, dtype)
                comm.all_to_all(out, data(R, c * N, dtype, salt=1), algo=algo)
                check(f"all_to_all {algo} {dn} c={c}", out, want, dtype)
                x = data(R, c * N, dtype, salt=1)
                comm.all_to_all(x, x, algo=algo)
                check(f"all_to_all in-place {algo} {dn} c={c}", x, want, dtype)
        if enabled("all_to_all_v"):
            # random splits (about a quarter of them zero), the same on every rank: seeded by c
            table = np.random.default_rng(c).integers(0, 2 * c + 2, size=(N, N))
            table[np.random.default_rng(c + 1).random((N, N)) < 0.25] = 0

            def cnt(src, dst):
                return int(table[src, dst])
            insp = [cnt(R, p) for p in range(N)]
            outsp = [cnt(p, R) for p in range(N)]
            x = data(R, sum(insp), dtype, salt=2)
            ins = {r: data(r, sum(cnt(r, p) for p in range(N)), dtype, salt=2) for r in range(N)}
            want = np.concatenate([ins[p][sum(cnt(p, q) for q in range(R)):][:cnt(p, R)] for p in range(N)])
            # The plans all_to_all_v runs: without scratch, and 2dh (scratch sized from the counts).
            for algo in [a for a in algos_for("all_to_all") if a in ("auto", "direct", "pairwise", "2dh")]:
                out = alloc(sum(outsp), dtype)
                comm.all_to_all_v(out, x, outsp, insp, algo=algo)
                check(f"all_to_all_v {algo} {dn} c={c}", out, want, dtype)
        if enabled("broadcast"):
            for algo in algos_for("broadcast"):
                for root in sorted({0, N - 1, N // 2}):
                    x = data(R, c, dtype, salt=3)
                    comm.broadcast(x, root, algo=algo)
                    check(f"broadcast root={root} {algo} {dn} c={c}", x, data(root, c, dtype, salt=3), dtype)
        if enabled("gather"):
            for algo in algos_for("gather"):
                for root in sorted({0, N - 1}):
                    out = alloc(c * N, dtype) if R == root else None
                    comm.gather(out, data(R, c, dtype), root, algo=algo)
                    if R == root:
                        check(f"gather root={root} {algo} {dn} c={c}", out,
                              np.concatenate([data(r, c, dtype) for r in range(N)]), dtype)
        if enabled("scatter"):
            for algo in algos_for("scatter"):
                for root in sorted({0, N - 1}):
                    x = data(R, c * N, dtype, salt=4) if R == root else None
                    out = alloc(c, dtype)
                    comm.scatter(out, x, root, algo=algo)
                    check(f"scatter root={root} {algo} {dn} c={c}", out,
                          data(root, c * N, dtype, salt=4)[R * c:(R + 1) * c], dtype)

if enabled("barrier"):
    for algo in algos_for("barrier"):
        comm.barrier(algo=algo)
        checked += 1
if enabled("send") and N > 1:
    # a ring exchange: post the send asynchronously, then receive from the left
    for c in SIZES:
        x = data(R, c, np.float32, salt=5)
        out = alloc(c, np.float32)
        work = comm.send(x, (R + 1) % N, async_op=True)
        comm.recv(out, (R - 1) % N)
        work.wait()
        check(f"send/recv c={c}", out, data((R - 1) % N, c, np.float32, salt=5), np.float32)
if enabled("async"):
    # several queued calls, then wait in reverse order
    xs = [data(R, 1000 + i, np.float32) for i in range(4)]
    works = [comm.all_reduce(x, async_op=True) for x in xs]
    for w, x in zip(reversed(works), reversed(xs)):
        assert w.wait() is x
        assert w.is_completed()
    for i, x in enumerate(xs):
        stack = np.stack([data(r, 1000 + i, np.float32) for r in range(N)])
        check(f"async all_reduce #{i}", x, reference(stack, "sum", np.float32), np.float32)

for f in failures[:40]:
    print("FAIL", f)
print("CHECKED", checked, "FAILURES", len(failures))
if args.corrupt:
    print("CORRUPTED", corrupted)
sys.exit(1 if failures else 0)
