"""Collectives on GPU memory (issue 15): the rank program of tests/test_gpu.py.

usage: gpu_check.py MODE [options]
  matrix    every collective x dtype x op x in place / out of place x count, against a numpy
            reference computed on the host from every rank's deterministic input (small integers,
            so sums and products are exact in every dtype, fp16/bf16/fp8 included).
            Prints "CHECKED n FAILURES f UNSUPPORTED u", one "FAIL ..." line per mismatch or error
            and one "UNSUPPORTED ..." line per named algorithm that refused GPU memory; exits 1
            on any failure. A dtype that fails (unsupported by the build) is a FAIL line and the
            next dtype still runs; a forestcc error (the communicator is poisoned) ends the run.
  features  one line per feature, "OK <feature>" or "FAIL <feature>: ...": basic, stream_kinds,
            async, two_comms, graph (torch), barrier, sendrecv (last: GPU send/recv may be
            refused, with an error that says GPU).
  killed    rank --victim exits (os._exit(1)) instead of calling all_reduce, at once or after
            --when later (2 s); the others print "RAISED <type> <message>" (the forestcc error of
            the call or of comm.synchronize()).
  mismatch  rank 0 passes one element more; every rank prints "MISMATCH <type> <message>".

--lib torch|cupy picks the arrays; --lib numpy runs the same program on host memory (a CPU
stand-in, so the program is checked where there is no GPU). --memory forestcc allocates with
forestcc.cuda.empty (IPC-ready), --memory framework with torch.empty / cupy.empty.
Results are read on the caller's stream (torch's .cpu(), CuPy's .get()), never after an extra
synchronize, so a collective that ignores the caller's stream shows up as wrong data.
"""
import argparse
import os
import sys
import time
import traceback

import ml_dtypes
import numpy as np

import forestcc
from forestcc import _C

DTYPES = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "uint32": np.uint32,
          "int64": np.int64, "uint64": np.uint64, "float16": np.float16,
          "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64,
          "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
FP8 = ("float8_e4m3fn", "float8_e5m2")
NO_CUPY = ("bfloat16",) + FP8  # CuPy has neither bf16 nor fp8
OPS = ["sum", "prod", "min", "max", "avg"]

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["matrix", "features", "killed", "mismatch"])
parser.add_argument("--lib", default="torch", choices=["torch", "cupy", "numpy"])
parser.add_argument("--memory", default="forestcc", choices=["forestcc", "framework"])
parser.add_argument("--algos", default="auto", help="'auto', 'all' or comma-separated names")
parser.add_argument("--algo-dtypes", default="all",
                    help="dtypes that run every algorithm of --algos; the others run auto only")
parser.add_argument("--dtypes", default="all", help="'all' (every dtype but fp8) or names")
parser.add_argument("--sizes", default="0,1,1001")
parser.add_argument("--large", type=int, default=0, help="one more count, auto, sum and max")
parser.add_argument("--large-dtypes", default="float32")
parser.add_argument("--collectives", default="all")
parser.add_argument("--victim", type=int, default=1)
parser.add_argument("--when", default="now", choices=["now", "later"])
parser.add_argument("--packets-by-rank", default="",
                    help="FORESTCC_PACKETS of rank 0, 1, ... (comma-separated; the last for the rest)")
args = parser.parse_args()
if args.packets_by_rank:  # read when the communicator is made
    settings = args.packets_by_rank.split(",")
    os.environ["FORESTCC_PACKETS"] = settings[min(int(os.environ["FORESTCC_RANK"]), len(settings) - 1)]

LIB = args.lib
if LIB == "torch":
    import torch
elif LIB == "cupy":
    import cupy
if LIB != "numpy":
    import forestcc.cuda  # imported plainly: the package ships it

comm = forestcc.init()
N, R = comm.size, comm.rank
if LIB == "torch":
    torch.cuda.set_device(comm.local_rank % torch.cuda.device_count())
elif LIB == "cupy":
    cupy.cuda.Device(comm.local_rank % cupy.cuda.runtime.getDeviceCount()).use()
if LIB != "numpy" and not forestcc.cuda.is_available():
    print(f"ERROR rank {R}: forestcc.cuda.is_available() is False under --lib {LIB}", flush=True)
    sys.exit(1)
notes = set()


def note(text):
    if text not in notes:
        notes.add(text)
        print("NOTE", text, flush=True)


# -- arrays -------------------------------------------------------------------------------------

def torch_dtype(name):
    return getattr(torch, name)


def alloc(count, name):
    """An uninitialized 1-D array of `count` elements of dtype `name` in this run's memory."""
    if LIB == "numpy":
        return forestcc.empty(count, dtype=DTYPES[name])
    if args.memory == "framework":
        if LIB == "torch":
            return torch.empty(count, dtype=torch_dtype(name), device="cuda")
        return cupy.empty(count, dtype=DTYPES[name])
    try:
        a = forestcc.cuda.empty(count, dtype=DTYPES[name], like=LIB)
    except (TypeError, ValueError) as e:
        if LIB != "torch":
            raise
        # The numpy spelling of bf16/fp8 (ml_dtypes) was refused: try torch's own dtype object.
        a = forestcc.cuda.empty(count, dtype=torch_dtype(name), like=LIB)
        note(f"forestcc.cuda.empty refused dtype={DTYPES[name].__name__} ({e}); torch.{name} worked")
    if LIB == "torch":
        ok = isinstance(a, torch.Tensor) and a.is_cuda and a.dtype == torch_dtype(name)
    else:
        ok = isinstance(a, cupy.ndarray) and a.dtype == np.dtype(DTYPES[name])
    if not ok or a.shape != (count,):
        raise AssertionError(f"forestcc.cuda.empty({count}, {name}, like={LIB!r}) returned "
                             f"{type(a).__name__} {getattr(a, 'dtype', '?')} {tuple(a.shape)}")
    return a


def to_device(dev, host):
    """Copy the numpy array `host` (same dtype and size) into `dev`, on the current stream."""
    raw = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
    if LIB == "numpy":
        dev.reshape(-1).view(np.uint8)[...] = raw
    elif LIB == "torch":
        dev.view(torch.uint8).copy_(torch.from_numpy(raw.copy()))
    else:
        dev.view(cupy.uint8).set(raw)
    return dev


def to_host(dev, name):
    """`dev` as a numpy array, read on the current stream (so after the collectives on it)."""
    if dev is None:
        return None
    if LIB == "numpy":
        return np.array(dev, copy=True)
    if LIB == "torch":
        raw = dev.contiguous().view(torch.uint8).cpu().numpy()
    else:
        raw = dev.view(cupy.uint8).get()
    return raw.view(DTYPES[name])


def sync():
    if LIB != "numpy":
        comm.synchronize()


def data(rank, count, name, op="sum", salt=0):
    """Rank `rank`'s input (numpy): small integers, so every reduction is exact in `name`,
    fp8 included (|partial sums| <= 8 for four ranks; products are powers of two)."""
    i = np.arange(count, dtype=np.int64)
    fp8 = name in FP8
    if op == "prod":
        v = (i * 7 + rank * 3 + salt) % (2 if fp8 else 3) + 1
    else:
        m = 5 if fp8 else 13
        v = (i * 5 + rank * 11 + salt) % m
        if np.dtype(DTYPES[name]).kind != "u":
            v = v - m // 2
    if np.dtype(DTYPES[name]).kind in "iu":
        return v.astype(DTYPES[name])
    return v.astype(np.float64).astype(DTYPES[name])


def dev_data(rank, count, name, op="sum", salt=0):
    return to_device(alloc(count, name), data(rank, count, name, op, salt))


def reference(stack, op, name):
    dtype = DTYPES[name]
    kind = np.dtype(dtype).kind
    if op in ("sum", "avg", "prod"):
        acc = np.float64 if kind in "fV" else dtype
        r = (np.sum if op != "prod" else np.prod)(stack.astype(acc), axis=0, dtype=acc)
        if op == "avg":
            if kind in "iu":  # integer average truncates toward zero
                r = np.where(r < 0, -((-r) // N), r // N)
            else:
                r = r / N
        return r.astype(dtype)
    return (np.min if op == "min" else np.max)(stack.astype(np.float64), axis=0).astype(dtype)


def same(got, want, name, op):
    if np.dtype(DTYPES[name]).kind in "iu":
        return np.array_equal(got, want)
    g, w = got.astype(np.float64), want.astype(np.float64)
    if op == "avg":  # the only inexact result: allow 2 ulp of the dtype
        tol = 2 * float(ml_dtypes.finfo(DTYPES[name]).eps)
        return g.shape == w.shape and bool(np.allclose(g, w, rtol=tol, atol=tol))
    return np.array_equal(g, w)


checked = 0
failures = []
unsupported = []


def check(label, dev, want, name, op="none"):
    global checked
    checked += 1
    got = to_host(dev, name)
    if not same(got, want, name, op):
        g, w = got.astype(np.float64), want.astype(np.float64)
        bad = np.flatnonzero(g != w) if g.shape == w.shape else np.arange(0)
        failures.append(f"{label}: {len(bad)} wrong of {w.size}, first at {bad[:5].tolist()}: "
                        f"got {g[bad[:3]].tolist()} want {w[bad[:3]].tolist()}"
                        if g.shape == w.shape else f"{label}: shape {g.shape} want {w.shape}")


def refused(algo, collective, exc):
    """A named algorithm that says it does not serve GPU memory: listed, not a failure (auto
    must still serve the call)."""
    msg = str(exc)
    if algo != "auto" and not isinstance(exc, forestcc.ForestccError) \
            and isinstance(exc, (TypeError, ValueError, NotImplementedError)) \
            and ("support" in msg.lower()):
        unsupported.append(f"{algo} {collective}: {msg.splitlines()[0]}")
        return True
    return False


# -- matrix -------------------------------------------------------------------------------------

supported = {a: set(c) for a, c in _C.plan.algorithms()}


def algos_for(collective, name):
    if args.algo_dtypes != "all" and name not in args.algo_dtypes.split(","):
        return ["auto"]
    if args.algos == "all":
        return ["auto"] + sorted(a for a, c in supported.items() if collective in c)
    return [a for a in args.algos.split(",") if a == "auto" or collective in supported.get(a, ())]


def enabled(collective):
    return args.collectives == "all" or collective in args.collectives.split(",")


def each(collective, name, algos, body):
    """Run body(algo) for every algorithm; a refusal by a named algorithm is listed, not failed."""
    for algo in algos:
        try:
            body(algo)
        except forestcc.ForestccError:
            raise
        except Exception as e:  # sorted below
            if not refused(algo, collective, e):
                raise


def matrix_dtype(name, c, ops, large):
    def algos(collective):
        return ["auto"] if large else algos_for(collective, name)

    for op in ops:
        matrix_reductions(name, c, op, algos)
    matrix_movement(name, c, algos, large)


def matrix_reductions(name, c, op, algos):
    dn = name
    if enabled("all_reduce"):
        want = reference(np.stack([data(r, c, name, op) for r in range(N)]), op, name)

        def all_reduce(algo):
            x = dev_data(R, c, name, op)
            comm.all_reduce(x, op=op, algo=algo)
            check(f"all_reduce in-place {algo} {dn} {op} c={c}", x, want, name, op)
            x = dev_data(R, c, name, op)
            out = alloc(c, name)
            comm.all_reduce(x, op=op, out=out, algo=algo)
            check(f"all_reduce {algo} {dn} {op} c={c}", out, want, name, op)
            check(f"all_reduce input intact {algo} {dn} {op} c={c}", x, data(R, c, name, op), name)
        each("all_reduce", name, algos("all_reduce"), all_reduce)
    if enabled("reduce_scatter"):
        full = reference(np.stack([data(r, c * N, name, op) for r in range(N)]), op, name)
        want = full[R * c:(R + 1) * c]

        def reduce_scatter(algo):
            x = dev_data(R, c * N, name, op)
            out = alloc(c, name)
            comm.reduce_scatter(out, x, op=op, algo=algo)
            check(f"reduce_scatter {algo} {dn} {op} c={c}", out, want, name, op)
            x = dev_data(R, c * N, name, op)
            comm.reduce_scatter(x[R * c:(R + 1) * c], x, op=op, algo=algo)
            check(f"reduce_scatter in-place {algo} {dn} {op} c={c}", x[R * c:(R + 1) * c],
                  want, name, op)
        each("reduce_scatter", name, algos("reduce_scatter"), reduce_scatter)
    if enabled("reduce"):
        want = reference(np.stack([data(r, c, name, op) for r in range(N)]), op, name)

        def reduce(algo):
            for root in sorted({0, N - 1}):
                x = dev_data(R, c, name, op)
                out = alloc(c, name)
                comm.reduce(x, root, op=op, out=out, algo=algo)
                if R == root:
                    check(f"reduce root={root} {algo} {dn} {op} c={c}", out, want, name, op)
                check(f"reduce input intact root={root} {algo} {dn} {op} c={c}", x,
                      data(R, c, name, op), name)
                x = dev_data(R, c, name, op)
                comm.reduce(x, root, op=op, algo=algo)
                if R == root:
                    check(f"reduce in-place root={root} {algo} {dn} {op} c={c}", x, want, name, op)
        each("reduce", name, algos("reduce"), reduce)


def matrix_movement(name, c, algos, large):
    """The collectives that move data: ops do not apply."""
    dn = name
    if enabled("all_gather"):
        want = np.concatenate([data(r, c, name) for r in range(N)])

        def all_gather(algo):
            out = alloc(c * N, name)
            comm.all_gather(out, dev_data(R, c, name), algo=algo)
            check(f"all_gather {algo} {dn} c={c}", out, want, name)
            out = alloc(c * N, name)
            to_device(out[R * c:(R + 1) * c], data(R, c, name))
            comm.all_gather(out, out[R * c:(R + 1) * c], algo=algo)
            check(f"all_gather in-place {algo} {dn} c={c}", out, want, name)
        each("all_gather", name, algos("all_gather"), all_gather)
    if enabled("all_to_all"):
        ins = [data(r, c * N, name, salt=1) for r in range(N)]
        want = np.concatenate([ins[b][R * c:(R + 1) * c] for b in range(N)])

        def all_to_all(algo):
            out = alloc(c * N, name)
            comm.all_to_all(out, dev_data(R, c * N, name, salt=1), algo=algo)
            check(f"all_to_all {algo} {dn} c={c}", out, want, name)
            x = dev_data(R, c * N, name, salt=1)
            comm.all_to_all(x, x, algo=algo)
            check(f"all_to_all in-place {algo} {dn} c={c}", x, want, name)
        each("all_to_all", name, algos("all_to_all"), all_to_all)
    if enabled("all_to_all_v") and not large:
        def cnt(src, dst):  # rank src sends this many elements to rank dst
            return (src * 2 + dst + c) % 4
        ins = {r: data(r, sum(cnt(r, p) for p in range(N)), name, salt=2) for r in range(N)}
        want = np.concatenate([ins[p][sum(cnt(p, q) for q in range(R)):][:cnt(p, R)]
                               for p in range(N)])
        out = alloc(sum(cnt(p, R) for p in range(N)), name)
        comm.all_to_all_v(out, to_device(alloc(len(ins[R]), name), ins[R]),
                          [cnt(p, R) for p in range(N)], [cnt(R, p) for p in range(N)])
        check(f"all_to_all_v {dn} c={c}", out, want, name)
    if enabled("broadcast"):
        def broadcast(algo):
            for root in sorted({0, N - 1, N // 2}):
                x = dev_data(R, c, name, salt=3)
                comm.broadcast(x, root, algo=algo)
                check(f"broadcast root={root} {algo} {dn} c={c}", x, data(root, c, name, salt=3), name)
        each("broadcast", name, algos("broadcast"), broadcast)
    if enabled("gather"):
        def gather(algo):
            for root in sorted({0, N - 1}):
                out = alloc(c * N, name) if R == root else None
                comm.gather(out, dev_data(R, c, name), root, algo=algo)
                if R == root:
                    check(f"gather root={root} {algo} {dn} c={c}", out,
                          np.concatenate([data(r, c, name) for r in range(N)]), name)
        each("gather", name, algos("gather"), gather)
    if enabled("scatter"):
        def scatter(algo):
            for root in sorted({0, N - 1}):
                x = dev_data(R, c * N, name, salt=4) if R == root else None
                out = alloc(c, name)
                comm.scatter(out, x, root, algo=algo)
                check(f"scatter root={root} {algo} {dn} c={c}", out,
                      data(root, c * N, name, salt=4)[R * c:(R + 1) * c], name)
        each("scatter", name, algos("scatter"), scatter)


def run_matrix():
    if args.dtypes == "all":
        names = [n for n in DTYPES if n not in FP8 and not (LIB == "cupy" and n in NO_CUPY)]
    else:
        names = args.dtypes.split(",")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    for name in names:
        if LIB == "cupy" and name in NO_CUPY:
            failures.append(f"{name}: CuPy has no {name}; ask for it with --lib torch")
            continue
        try:
            for c in sizes:
                matrix_dtype(name, c, OPS, large=False)
            if args.large and name in args.large_dtypes.split(","):
                matrix_dtype(name, args.large, ["sum", "max"], large=True)
            if enabled("barrier"):
                comm.barrier()
            sync()  # raises what any GPU call of this dtype hit
        except forestcc.ForestccError as e:
            failures.append(f"{name}: {type(e).__name__}: {e}")
            print("STOPPED after a forestcc error (the communicator is poisoned)", flush=True)
            break
        except Exception as e:  # noqa: BLE001 - e.g. a dtype the build does not support yet
            failures.append(f"{name}: {type(e).__name__}: {e}")
            traceback.print_exc()
    for f in failures[:60]:
        print("FAIL", f.replace("\n", " | "))
    for u in sorted(set(unsupported)):
        print("UNSUPPORTED", u.replace("\n", " | "))
    print("CHECKED", checked, "FAILURES", len(failures), "UNSUPPORTED", len(set(unsupported)),
          flush=True)
    return 1 if failures else 0


# -- features -----------------------------------------------------------------------------------

def fill(x, value):
    """x[:] = value on the current stream (a kernel, so the stream has work before the call)."""
    if LIB == "numpy":
        x[...] = value
    else:
        x.fill_(value) if LIB == "torch" else x.fill(value)


def expect_all(label, x, value, name="float32"):
    got = to_host(x, name)
    want = np.broadcast_to(np.asarray(value, dtype=got.dtype), got.shape)
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)
        raise AssertionError(f"{label}: {len(bad)} of {got.size} wrong, first at {bad[:3].tolist()}:"
                             f" got {got[bad[:3]].tolist()} want {want[bad[:3]].tolist()}")


def new_stream():
    if LIB == "torch":
        return torch.cuda.Stream()
    return cupy.cuda.Stream(non_blocking=True)


def on(stream):
    """Context manager making `stream` the framework's current stream."""
    return torch.cuda.stream(stream) if LIB == "torch" else stream


def stream_handle(stream):
    return stream.cuda_stream if LIB == "torch" else stream.ptr


def feature_basic():
    x = to_device(alloc(1001, "float32"), np.full(1001, R + 1, np.float32))
    comm.all_reduce(x)
    expect_all("all_reduce", x, N * (N + 1) // 2)
    sync()


def feature_stream_kinds():
    if LIB == "numpy":
        return "skip"
    # The input is written by a kernel on s, and the result read by a kernel on s: the
    # collective must run between them on s, whichever way s is given.
    count = 1 << 22
    total = N * (N + 1) // 2
    for kind in ("current", "object", "int"):
        s = new_stream()
        x = alloc(count, "float32")
        with on(s):
            fill(x, R + 1)
            if kind == "current":
                comm.all_reduce(x)
        if kind == "object":
            comm.all_reduce(x, stream=s)
        elif kind == "int":
            comm.all_reduce(x, stream=stream_handle(s))
        with on(s):
            y = x * 2
        s.synchronize()
        expect_all(f"stream given as {kind}", y, 2 * total)
    sync()


def feature_async():
    xs = [to_device(alloc(1000 + 37 * i, "float32"), np.full(1000 + 37 * i, R + i, np.float32))
          for i in range(4)]
    works = [comm.all_reduce(x, async_op=True) for x in xs]
    out = alloc(1001 * N, "float32")
    wg = comm.all_gather(out, to_device(alloc(1001, "float32"), np.full(1001, R, np.float32)),
                         async_op=True)
    for w in reversed(works):
        w.wait()
        if not w.is_completed():
            raise AssertionError("is_completed() is False after wait()")
    wg.wait()
    for i, x in enumerate(xs):
        expect_all(f"async all_reduce #{i}", x, sum(r + i for r in range(N)))
    expect_all("async all_gather", out, np.repeat(np.arange(N, dtype=np.float32), 1001))


def feature_two_comms():
    if LIB == "numpy":
        return "skip"
    dup = comm.split(0)  # every rank: a second communicator over the same ranks
    parity = comm.split(R % 2)
    members = [r for r in range(N) if r % 2 == R % 2]
    s1, s2, s3 = new_stream(), new_stream(), new_stream()
    count = 1 << 18
    a, b, c = [], [], []
    for it in range(6):  # interleaved: comm on s1, dup on s2, parity on s3
        a.append(alloc(count, "float32"))
        b.append(alloc(count, "float32"))
        c.append(alloc(count, "float32"))
        with on(s1):
            fill(a[-1], R + it)
            comm.all_reduce(a[-1])
        with on(s2):
            fill(b[-1], 2 * R + it)
            dup.all_reduce(b[-1])
        with on(s3):
            fill(c[-1], R + 1)
            parity.all_reduce(c[-1], op="max" if it % 2 else "sum")
    for s in (s1, s2, s3):
        s.synchronize()
    comm.synchronize()
    dup.synchronize()
    parity.synchronize()
    for it in range(6):
        expect_all(f"comm #{it}", a[it], sum(r + it for r in range(N)))
        expect_all(f"dup #{it}", b[it], sum(2 * r + it for r in range(N)))
        expect_all(f"parity #{it}", c[it],
                   max(members) + 1 if it % 2 else sum(m + 1 for m in members))


def feature_graph():
    if LIB != "torch":
        return "skip"
    count = 1 << 16
    x, y = alloc(count, "float32"), alloc(count, "float32")

    def values(rank, i):
        return (np.arange(count) % 7 + rank * 3 + i).astype(np.float32)

    to_device(x, values(R, 0))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, outside the capture
        comm.all_reduce(x, out=y)
        comm.all_reduce(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        comm.all_reduce(x, out=y)  # y = sum of x
        comm.all_reduce(x)         # x = sum of x, in place
    for i in range(1, 7):
        to_device(x, values(R, i))
        g.replay()
        want = sum(values(r, i) for r in range(N))
        check(f"graph replay {i} out-of-place", y, want, "float32")
        check(f"graph replay {i} in-place", x, want, "float32")
        if i == 3:  # calls between replays: auto, and an eager plan (GPU scratch banks)
            z = to_device(alloc(999, "float32"), np.full(999, R, np.float32))
            comm.all_reduce(z)
            expect_all("call between replays", z, sum(range(N)))
            comm.all_reduce(z, algo="eager")
            expect_all("eager call between replays", z, N * sum(range(N)))
    torch.cuda.synchronize()
    # Eager plans (GPU scratch banks) inside a capture: the bank is counted on the GPU, so each
    # replay takes the next one. One eager call per replay (an odd count: a bank fixed at capture
    # would be reused by consecutive replays), warmed up first (the banks are allocated and the
    # peers' opened outside the capture), with uncaptured eager calls between replays.
    small = 1000
    u, v = alloc(small, "float32"), alloc(small, "float32")

    def small_values(rank, i):
        return (np.arange(small) % 5 + rank + 10 * i).astype(np.float32)

    to_device(u, small_values(R, 0))
    with torch.cuda.stream(side):
        comm.all_reduce(u, out=v, algo="eager")
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    check("eager warm-up", v, sum(small_values(r, 0) for r in range(N)), "float32")
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2):
        comm.all_reduce(u, out=v, algo="eager")
    for i in range(1, 6):
        to_device(u, small_values(R, i))
        g2.replay()
        check(f"eager graph replay {i}", v, sum(small_values(r, i) for r in range(N)), "float32")
        if i % 2 == 0:
            z = to_device(alloc(999, "float32"), np.full(999, R + i, np.float32))
            comm.all_reduce(z, algo="eager")
            expect_all(f"eager call after replay {i}", z, sum(r + i for r in range(N)))
    torch.cuda.synchronize()
    sync()
    if failures:
        raise AssertionError("; ".join(failures))


def feature_barrier():
    for _ in range(3):
        comm.barrier()
    sync()


def feature_sendrecv():
    if N < 2:
        return
    x = to_device(alloc(1001, "float32"), np.full(1001, R + 7, np.float32))
    try:
        if R == 0:
            comm.send(x, 1)
        elif R == 1:
            comm.recv(x, 0)
        sync()
    except Exception as e:  # judged by its message (re-raised unless it names the GPU)
        msg = str(e)
        if "gpu" in msg.lower() or "cuda" in msg.lower():
            print(f"OK sendrecv refused: {type(e).__name__}: {msg.splitlines()[0]}", flush=True)
            return "refused"
        raise
    if R == 1:
        expect_all("recv", x, 7)


FEATURES = [("basic", feature_basic), ("stream_kinds", feature_stream_kinds),
            ("async", feature_async), ("two_comms", feature_two_comms),
            ("graph", feature_graph), ("barrier", feature_barrier),
            ("sendrecv", feature_sendrecv)]


def run_features():
    poisoned = None
    status = 0
    for name, body in FEATURES:
        if poisoned:
            print(f"FAIL {name}: not run: {poisoned}", flush=True)
            continue
        try:
            result = body()
            if result == "skip":
                print(f"SKIP {name}: not with --lib {LIB}", flush=True)
            elif result != "refused":
                print("OK", name, flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported by name
            status = 1
            msg = f"{type(e).__name__}: {e}".replace("\n", " | ")
            print(f"FAIL {name}: {msg}", flush=True)
            traceback.print_exc()
            if isinstance(e, forestcc.ForestccError):
                poisoned = f"an earlier feature raised {msg[:300]}"
        failures.clear()
    return status


# -- errors -------------------------------------------------------------------------------------

def run_killed():
    x = to_device(alloc(1 << 16, "float32"), np.full(1 << 16, R + 1, np.float32))
    comm.all_reduce(x)  # connections made and checked before anyone dies
    expect_all("warm-up", x, N * (N + 1) // 2)
    sync()
    print("OK warm-up", flush=True)
    if R == args.victim:
        if args.when == "later":
            time.sleep(2)  # the others are in the call (kernels waiting) by now
        print("EXITING", flush=True)
        os._exit(1)
    try:
        comm.all_reduce(x)
        sync()
        print("FAIL all_reduce with a dead peer returned without an error", flush=True)
        return 1
    except forestcc.ForestccError as e:
        print("RAISED", type(e).__name__, str(e).replace("\n", " | "), flush=True)
        return 0


def run_mismatch():
    x = to_device(alloc(100 + (R == 0), "float32"), np.ones(100 + (R == 0), np.float32))
    try:
        comm.all_reduce(x)
        sync()
        print("FAIL all_reduce with different counts returned", flush=True)
        return 1
    except (forestcc.MismatchError, forestcc.AbortedError) as e:
        print("MISMATCH", type(e).__name__, str(e).replace("\n", " | "), flush=True)
        return 0
    except forestcc.ForestccError as e:
        print("FAIL wrong error:", type(e).__name__, str(e).replace("\n", " | "), flush=True)
        return 1


sys.exit({"matrix": run_matrix, "features": run_features, "killed": run_killed,
          "mismatch": run_mismatch}[args.mode]())
