"""Every ProcessGroup operation of the forestcc backend against gloo's result in the same job.

The world group is forestcc's (``init_process_group("forestcc")``); a gloo group of the same
ranks computes the reference from the same inputs. Where gloo has no such operation (AVG,
PREMUL_SUM, some dtypes) the reference is gloo's SUM turned into it, or computed from every
rank's (deterministic) input. Runs on any number of ranks, under forestcc-run, torchrun or
mpirun. Prints "CHECKED n" and "OK" when everything matched, "FAIL ..." lines otherwise.

argv: [--quick]  (a few checks only: for launcher tests)
"""
import os
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import forestcc.torch  # noqa: F401 - registers the backend
from forestcc.torch.reductions import PREMUL_SUM_SUPPORTED
from forestcc.torch.tensors import as_bytes

QUICK = "--quick" in sys.argv
dist.init_process_group("forestcc", timeout=timedelta(seconds=90))
R, N = dist.get_rank(), dist.get_world_size()
FCC = dist.group.WORLD
GLOO = dist.new_group(backend="gloo")
assert dist.get_backend(FCC) == "forestcc", dist.get_backend(FCC)
assert FCC.communicator.timeout == 90, FCC.communicator.timeout
checked = 0
failures = []


def data(rank, shape, dtype, salt=0):
    """Rank ``rank``'s input: small integers, so sums and products are exact in every dtype."""
    numel = 1
    for d in shape:
        numel *= d
    v = (torch.arange(numel, dtype=torch.int64) * 7 + rank * 3 + salt) % 5 + 1
    if dtype == torch.bool:
        return (v % 2 == 0).reshape(shape)
    if dtype.is_complex:
        return torch.complex(v.double(), -v.double()).to(dtype).reshape(shape)
    return v.to(dtype).reshape(shape)


def same(name, got, want, exact=True):
    global checked
    checked += 1
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    try:
        assert len(got) == len(want), f"{len(got)} tensors, expected {len(want)}"
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
            if exact:
                assert torch.equal(g, w), f"\n got  {g}\n want {w}"
            else:  # a few units in the last place of the dtype
                tol = 1e-2 if g.dtype in (torch.float16, torch.bfloat16) else 1e-5
                assert torch.allclose(g, w, rtol=tol, atol=tol), f"\n got  {g}\n want {w}"
    except AssertionError as e:
        failures.append(f"FAIL rank {R} {name}: {e}")


def case(fn):
    """Run one check; an exception is a failure of that check, not of the job."""
    t0 = time.perf_counter()
    try:
        fn()
        if os.environ.get("TORCH_OPS_TIMES"):
            print(f"TIME {fn.__name__} {time.perf_counter() - t0:.2f} s", flush=True)
    except Exception:
        failures.append(f"FAIL rank {R} {fn.__name__}: {traceback.format_exc()}")
    return fn


def both(fn):
    """fn(group) on forestcc and on gloo, each on fresh inputs; returns both results."""
    return fn(FCC), fn(GLOO)


# -- all_reduce -------------------------------------------------------------------------------
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX}
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.int16, torch.bool]


def local_reduce(opname, tensors):
    """The reduction of every rank's input, computed here (for what gloo does not reduce)."""
    dtype = tensors[0].dtype
    wide = torch.stack([t.to(torch.int64 if not dtype.is_floating_point else torch.float64)
                        for t in tensors])
    if opname == "SUM":
        v = wide.sum(0)
    elif opname == "PRODUCT":
        v = wide.prod(0)
    elif opname == "MIN":
        v = wide.min(0).values
    elif opname == "MAX":
        v = wide.max(0).values
    else:
        raise ValueError(opname)
    return v.bool() if dtype == torch.bool else v.to(dtype)


@case
def all_reduce_dtypes_and_ops():
    dtypes = [torch.float32, torch.int64] if QUICK else DTYPES
    for dtype in dtypes:
        for opname, op in OPS.items():
            t = data(R, (3, 5), dtype)
            dist.all_reduce(t, op=op, group=FCC)
            ref = data(R, (3, 5), dtype)
            try:
                dist.all_reduce(ref, op=op, group=GLOO)
            except RuntimeError:  # gloo has no such reduction (int16): computed here
                ref = local_reduce(opname, [data(r, (3, 5), dtype) for r in range(N)])
            same(f"all_reduce {dtype} {opname}", t, ref)


@case
def all_reduce_avg_and_premul_sum():
    for dtype in ([torch.float32] if QUICK else [torch.float32, torch.float64, torch.bfloat16,
                                                 torch.complex64]):
        def run(g):
            t = data(R, (7,), dtype)
            dist.all_reduce(t, op=dist.ReduceOp.AVG, group=g)
            return t
        f, gl = both(run)
        same(f"all_reduce AVG {dtype}", f, gl, exact=False)
        t = data(R, (7,), dtype)
        if not PREMUL_SUM_SUPPORTED:  # a torch that hides the factor: refused, naming it
            try:
                dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=FCC)
            except NotImplementedError as e:
                named = f"torch {torch.__version__}" in str(e)
                same(f"PREMUL_SUM refused {dtype}", torch.tensor(named), torch.tensor(True))
            else:
                failures.append(f"FAIL rank {R} PREMUL_SUM {dtype}: not refused")
            continue
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=FCC)
        ref = data(R, (7,), dtype)
        dist.all_reduce(ref, group=GLOO)  # gloo has no PREMUL_SUM: its SUM, scaled
        same(f"all_reduce PREMUL_SUM {dtype}", t, ref * 0.5, exact=False)


@case
def all_reduce_layouts():
    # non-contiguous, 0-dim, empty, complex
    def run(g):
        base = data(R, (4, 6), torch.float32)
        if g is FCC:
            dist.all_reduce(base[:, ::2], group=g)
        else:  # gloo reduces the first elements of the storage instead of the view's
            cols = base[:, ::2].contiguous()
            dist.all_reduce(cols, group=g)
            base[:, ::2] = cols
        scalar = torch.tensor(float(R + 1))
        dist.all_reduce(scalar, group=g)
        empty = torch.empty(0)
        dist.all_reduce(empty, group=g)
        c = data(R, (5,), torch.complex64)
        dist.all_reduce(c, group=g)
        return [base, scalar, empty, c]
    f, gl = both(run)
    same("all_reduce non-contiguous / 0-dim / empty / complex", f, gl)


@case
def one_element_strides_and_parameters():
    # a one-element tensor with a stride other than 1 (a column slice: torch calls it contiguous,
    # and reshape keeps the stride, which a byte view refused), and non-contiguous parameters
    # (leaves that need grad, which a result copied back with autograd on refused)
    def col(v):
        m = torch.zeros(4, 4)
        m[0, 0] = v
        return m[0:1, 0]

    def run(g):
        b = col(R + 10.0)
        dist.broadcast(b, 0, group=g)
        outs = [torch.zeros(1) for _ in range(N)]
        dist.all_gather(outs, col(R + 10.0), group=g)
        y = col(-1.0)
        dist.scatter(y, [torch.full((1,), 20.0 + p) for p in range(N)] if R == 0 else None, src=0, group=g)
        return [b, *outs, y]
    f, gl = both(run)
    same("broadcast / all_gather / scatter of one-element strided tensors", f, gl)
    w = torch.nn.Parameter(data(R, (3, 4), torch.float32).t())
    dist.all_reduce(w, group=FCC)
    same("all_reduce into a non-contiguous parameter", w.detach(),
         sum(data(r, (3, 4), torch.float32) for r in range(N)).t())
    v = torch.nn.Parameter(data(R, (4, 3), torch.float32).t())
    dist.broadcast(v, 0, group=FCC)
    same("broadcast into a non-contiguous parameter", v.detach(), data(0, (4, 3), torch.float32).t())


@case
def all_reduce_async_and_future():
    t = data(R, (1000,), torch.float32)
    work = dist.all_reduce(t, async_op=True, group=FCC)
    chained = work.get_future().then(lambda fut: fut.value()[0] * 2)
    work.wait()
    assert work.is_completed() and work.is_success() and work.exception() is None
    ref = data(R, (1000,), torch.float32)
    dist.all_reduce(ref, group=GLOO)
    same("all_reduce async", t, ref)
    same("all_reduce future value", work.get_future().value()[0], ref)
    same("all_reduce future then", chained.wait(), ref * 2)
    # several in flight at once, waited in reverse
    ts = [data(R, (100 + i,), torch.float32, salt=i) for i in range(5)]
    works = [dist.all_reduce(x, async_op=True, group=FCC) for x in ts]
    for w in reversed(works):
        w.wait()
    refs = [data(R, (100 + i,), torch.float32, salt=i) for i in range(5)]
    for x in refs:
        dist.all_reduce(x, group=GLOO)
    same("all_reduce 5 in flight", ts, refs)


@case
def all_reduce_coalesced():
    def run(g):
        ts = [data(R, (3,), torch.float32), data(R, (2, 2), torch.float32, 1),
              data(R, (5,), torch.int64, 2)]
        if g is FCC:
            with dist._coalescing_manager(group=g, async_ops=True) as cm:
                for x in ts:
                    dist.all_reduce(x, group=g)
            cm.wait()
        else:
            for x in ts:
                dist.all_reduce(x, group=g)
        return ts
    f, gl = both(run)
    same("all_reduce coalesced", f, gl)
    ts = [data(R, (3,), torch.float32), data(R, (4,), torch.float32, 1)]
    FCC.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions()).wait()
    refs = [data(R, (3,), torch.float32), data(R, (4,), torch.float32, 1)]
    for x in refs:
        dist.all_reduce(x, group=GLOO)
    same("allreduce_coalesced", ts, refs)


# -- broadcast, reduce --------------------------------------------------------------------------
@case
def broadcast_every_root():
    roots = [N - 1] if QUICK else range(N)
    for root in roots:
        for dtype in ([torch.float32] if QUICK else [torch.float32, torch.bool, torch.complex64,
                                                     torch.int16]):
            def run(g):
                t = data(R, (2, 3), dtype)
                nc = data(R, (4, 4), dtype)[::2, 1:]
                if g is FCC:
                    dist.broadcast(t, root, group=g)
                    dist.broadcast(nc, root, group=g)
                else:  # gloo moves neither these dtypes nor views: their bytes, contiguous
                    nc = nc.contiguous()
                    for x in (t, nc):
                        dist.broadcast(as_bytes(x), root, group=g)
                return [t, nc]
            f, gl = both(run)
            same(f"broadcast root {root} {dtype}", f, gl)


@case
def reduce_every_root():
    for root in ([0] if QUICK else range(N)):
        for opname, op in (OPS.items() if not QUICK else [("SUM", dist.ReduceOp.SUM)]):
            t = data(R, (9,), torch.float32)
            dist.reduce(t, root, op=op, group=FCC)
            ref = data(R, (9,), torch.float32)
            dist.all_reduce(ref, op=op, group=GLOO)
            want = ref if R == root else data(R, (9,), torch.float32)  # others: untouched
            same(f"reduce root {root} {opname}", t, want)


# -- gathers ------------------------------------------------------------------------------------
@case
def all_gather_forms():
    def run(g):
        x = data(R, (2, 3), torch.float32)
        outs = [torch.empty(2, 3) for _ in range(N)]
        dist.all_gather(outs, x, group=g)
        flat = torch.empty(N * 2, 3)
        dist.all_gather_into_tensor(flat, x, group=g)
        b = data(R, (4,), torch.bool)
        bouts = [torch.empty(4, dtype=torch.bool) for _ in range(N)]
        dist.all_gather(bouts, b, group=g)
        return outs + [flat] + bouts
    f, gl = both(run)
    same("all_gather / all_gather_into_tensor", f, gl)
    # in place: the input is the output's block `rank`
    out = torch.zeros(N, 6)
    out[R] = data(R, (6,), torch.float32)
    dist.all_gather_into_tensor(out, out[R], group=FCC)
    ref = torch.empty(N * 6)
    dist.all_gather_into_tensor(ref, data(R, (6,), torch.float32), group=GLOO)
    same("all_gather_into_tensor in place", out, ref.view(N, 6))


@case
def all_gather_coalesced_forms():
    def run(g):
        xs = [data(R, (3,), torch.float32), data(R, (2, 2), torch.float32, 1)]
        outs = [torch.empty(N * 3), torch.empty(N * 2, 2)]
        if g is FCC:
            with dist._coalescing_manager(group=g, async_ops=True) as cm:
                for o, x in zip(outs, xs):
                    dist.all_gather_into_tensor(o, x, group=g)
            cm.wait()
        else:
            for o, x in zip(outs, xs):
                dist.all_gather_into_tensor(o, x, group=g)
        return outs
    f, gl = both(run)
    same("all_gather_into_tensor coalesced", f, gl)
    xs = [data(R, (3,), torch.int32), data(R, (2,), torch.float64, 1)]
    outs = [[torch.empty(3, dtype=torch.int32), torch.empty(2, dtype=torch.float64)]
            for _ in range(N)]
    FCC.allgather_coalesced(outs, xs).wait()
    want = [[data(r, (3,), torch.int32), data(r, (2,), torch.float64, 1)] for r in range(N)]
    same("allgather_coalesced", [t for row in outs for t in row], [t for row in want for t in row])


@case
def gather_and_scatter_every_root():
    for root in ([N - 1] if QUICK else range(N)):
        def run(g):
            x = data(R, (5,), torch.int64)
            outs = [torch.empty(5, dtype=torch.int64) for _ in range(N)] if R == root else None
            dist.gather(x, outs, dst=root, group=g)
            ins = [data(p, (5,), torch.int64, 3) for p in range(N)] if R == root else None
            y = torch.empty(5, dtype=torch.int64)
            dist.scatter(y, ins, src=root, group=g)
            return (outs or []) + [y]
        f, gl = both(run)
        same(f"gather / scatter root {root}", f, gl)


# -- reduce-scatter -----------------------------------------------------------------------------
@case
def reduce_scatter_forms():
    ops = [("SUM", dist.ReduceOp.SUM)] if QUICK else list(OPS.items())
    for opname, op in ops:
        def run(g):
            out = torch.empty(4)
            dist.reduce_scatter_tensor(out, data(R, (N * 4,), torch.float32), op=op, group=g)
            out2 = torch.empty(3, dtype=torch.int32)
            ins = [data(R, (3,), torch.int32, p) for p in range(N)]
            dist.reduce_scatter(out2, ins, op=op, group=g)
            return [out, out2]
        f, gl = both(run)
        same(f"reduce_scatter(_tensor) {opname}", f, gl)
    out = torch.empty(4)
    dist.reduce_scatter_tensor(out, data(R, (N * 4,), torch.float32), op=dist.ReduceOp.AVG,
                               group=FCC)
    ref = torch.empty(4)
    dist.reduce_scatter_tensor(ref, data(R, (N * 4,), torch.float32), group=GLOO)
    same("reduce_scatter_tensor AVG", out, ref / N, exact=False)
    # in place: the output is the input's block `rank`
    buf = data(R, (N * 4,), torch.float32)
    dist.reduce_scatter_tensor(buf[R * 4:(R + 1) * 4], buf, group=FCC)
    same("reduce_scatter_tensor in place", buf[R * 4:(R + 1) * 4], ref)


@case
def reduce_scatter_coalesced():
    def run(g):
        ins = [data(R, (N * 3,), torch.float32), data(R, (N * 2,), torch.float32, 1)]
        outs = [torch.empty(3), torch.empty(2)]
        if g is FCC:
            with dist._coalescing_manager(group=g, async_ops=True) as cm:
                for o, x in zip(outs, ins):
                    dist.reduce_scatter_tensor(o, x, group=g)
            cm.wait()
        else:
            for o, x in zip(outs, ins):
                dist.reduce_scatter_tensor(o, x, group=g)
        return outs
    f, gl = both(run)
    same("reduce_scatter_tensor coalesced", f, gl)


# -- all-to-all ---------------------------------------------------------------------------------
@case
def all_to_all_forms():
    def run(g):
        x = data(R, (N * 2, 3), torch.float32)
        out = torch.empty(N * 2, 3)
        dist.all_to_all_single(out, x, group=g)
        # uneven: rank r sends p + 1 rows to rank p
        ins = [data(R, (p + 1, 2), torch.float32, p) for p in range(N)]
        src = torch.cat(ins)
        out_v = torch.empty(N * (R + 1), 2)
        dist.all_to_all_single(out_v, src, [R + 1] * N, [p + 1 for p in range(N)], group=g)
        return [out, out_v]
    f, gl = both(run)
    same("all_to_all_single / with splits", f, gl)
    # gloo's list all_to_all takes equal sizes only: the uneven reference is computed here
    outs = [torch.empty(R + 1, 2, dtype=torch.int16) for _ in range(N)]
    dist.all_to_all(outs, [data(R, (p + 1, 2), torch.int16, p) for p in range(N)], group=FCC)
    same("all_to_all uneven lists", outs, [data(p, (R + 1, 2), torch.int16, R) for p in range(N)])


# -- point to point, barriers -------------------------------------------------------------------
@case
def send_recv_ring():
    if N == 1:
        return
    nxt, prv = (R + 1) % N, (R - 1) % N
    x = data(R, (4, 4), torch.float32)
    got = torch.empty(4, 4)
    ops = [dist.P2POp(dist.isend, x, nxt, group=FCC), dist.P2POp(dist.irecv, got, prv, group=FCC)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    same("batch_isend_irecv ring", got, data(prv, (4, 4), torch.float32))
    # a blocking receive into a non-contiguous tensor while the send is in flight
    y = torch.zeros(4, 8)
    w = dist.isend(x, nxt, group=FCC)
    dist.recv(y[:, ::2], prv, group=FCC)
    w.wait()
    same("isend / recv non-contiguous", y[:, ::2].contiguous(), data(prv, (4, 4), torch.float32))


@case
def barriers():
    dist.barrier(group=FCC)
    w = dist.barrier(group=FCC, async_op=True)
    w.wait()
    FCC.monitored_barrier(timedelta(seconds=60), wait_all_ranks=True)
    global checked
    checked += 1


# -- objects, sub-groups --------------------------------------------------
@case
def object_collectives():
    objs = [{"rank": R, "pad": "x" * (R * 17)}]
    gathered = [None] * N
    dist.all_gather_object(gathered, objs[0], group=FCC)
    assert gathered == [{"rank": r, "pad": "x" * (r * 17)} for r in range(N)], gathered
    lst = [R, "from", R] if R == N - 1 else [None, None, None]
    dist.broadcast_object_list(lst, src=N - 1, group=FCC)
    assert lst == [N - 1, "from", N - 1], lst
    global checked
    checked += 2


@case
def sub_groups():
    # every rank calls new_group for every group, members or not
    evens = [r for r in range(N) if r % 2 == 0]
    odds = [r for r in range(N) if r % 2 == 1]
    groups = {}
    for ranks in (evens, odds):
        if ranks:
            groups[tuple(ranks)] = (dist.new_group(ranks, backend="forestcc"),
                                    dist.new_group(ranks, backend="gloo"))
    mine = evens if R % 2 == 0 else odds
    fg, gg = groups[tuple(mine)]
    assert fg.size() == len(mine) and fg.rank() == mine.index(R)
    t, ref = data(R, (6,), torch.float32), data(R, (6,), torch.float32)
    dist.all_reduce(t, group=fg)
    dist.all_reduce(ref, group=gg)
    same(f"sub-group {mine} all_reduce", t, ref)
    b, bref = data(R, (3,), torch.int64), data(R, (3,), torch.int64)
    dist.broadcast(b, mine[-1], group=fg)        # global rank as src
    dist.broadcast(bref, mine[-1], group=gg)
    same(f"sub-group {mine} broadcast", b, bref)
    for f, g in groups.values():
        if R in dist.get_process_group_ranks(f):
            dist.destroy_process_group(f)
            dist.destroy_process_group(g)


# -- errors that stay on this rank (nothing is sent; the group still works afterwards) -----------
@case
def argument_errors():
    def refuses(exc, words, fn):
        global checked
        try:
            fn()
        except exc as e:
            msg = str(e)
            if not all(w in msg for w in words):
                failures.append(f"FAIL rank {R} error message {msg!r} lacks {words}")
            checked += 1
            return
        failures.append(f"FAIL rank {R}: {fn} did not raise {exc.__name__}")

    x = torch.ones(4)
    refuses(RuntimeError, ["forestcc", "all_gather_into_tensor", "output has"],
            lambda: dist.all_gather_into_tensor(torch.empty(N * 4 + 1), x, group=FCC))
    refuses(ValueError, ["reduce_scatter_tensor", "input has"],
            lambda: dist.reduce_scatter_tensor(torch.empty(3), torch.empty(N * 3 + 1), group=FCC))
    refuses(NotImplementedError, ["allreduce", "ReduceOp.BAND", "not supported"],
            lambda: dist.all_reduce(x.int(), op=dist.ReduceOp.BAND, group=FCC))
    refuses(RuntimeError, ["recv_anysource", "not supported"], lambda: dist.recv(x, group=FCC))
    refuses(RuntimeError, ["meta", "forestcc moves CPU and CUDA tensors"],
            lambda: dist.all_reduce(torch.empty(3, device="meta"), group=FCC))
    refuses(RuntimeError, ["all_to_all_single", "split"],
            lambda: dist.all_to_all_single(torch.empty(N), torch.empty(N), [2] * N, [1] * N,
                                           group=FCC))
    # A refused send still takes its place (schedules/README.md, "Refused calls"): rank 0's
    # refused receives match the others' refused sends (its own, to itself, has no place).
    refuses(RuntimeError, ["tag must be 0"], lambda: FCC.send([x], 0, 5))
    if R == 0:
        for r in range(1, N):
            refuses(RuntimeError, ["tag must be 0"], lambda r=r: FCC.recv([x], r, 5))
    t = torch.full((3,), float(R))
    dist.all_reduce(t, group=FCC)
    same("all_reduce after refused calls", t, torch.full((3,), float(N * (N - 1) // 2)))


for line in failures:
    print(line, flush=True)
print(f"CHECKED {checked}", flush=True)
dist.destroy_process_group()
if failures:
    sys.exit(1)
print("OK", flush=True)
