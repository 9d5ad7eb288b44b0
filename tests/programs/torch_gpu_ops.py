"""The forestcc torch backend on CUDA tensors: every ProcessGroup operation against gloo on CPU
copies of the same inputs (or, for reductions, the reduction of every rank's input computed
here), on several ranks that may share one GPU.

argv: MODE [--device cuda|cpu]  (cpu: the same checks on CPU tensors, for machines without a GPU)
  ops     every operation, dtypes, roots, layouts, async works and futures, streams, sub-groups;
          prints "CHECKED n" and "OK", or "FAIL ..." lines
  errors  a call mixing CPU and CUDA tensors (refused on this rank, nothing sent), then shapes
          that differ between ranks: prints "LOCAL <type> <message>" and "ERROR <type> <message>"
  p2p     send / recv, isend / irecv and batch_isend_irecv in a ring; "CHECKED n" and "OK"
  string  init_process_group("cpu:gloo,cuda:forestcc"): CPU and CUDA all_reduce; "OK"
"""
import os
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import forestcc.torch  # registers the backend
from forestcc.torch.reductions import PREMUL_SUM_SUPPORTED

MODE = sys.argv[1]
KIND = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"
if KIND == "cuda":
    # Ranks beyond the GPUs share them (tests run 2-4 ranks on one GPU).
    local = int(os.environ.get("FORESTCC_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
    DEV = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(DEV)
else:
    DEV = torch.device("cpu")

backend = "cpu:gloo,cuda:forestcc" if MODE == "string" else "forestcc"
dist.init_process_group(backend, timeout=timedelta(seconds=90))
R, N = dist.get_rank(), dist.get_world_size()
FCC = dist.group.WORLD
GLOO = dist.new_group(backend="gloo")
checked = 0
failures = []


def data(rank, shape, dtype, salt=0, device=DEV):
    """Rank ``rank``'s input: small integers, exact in every dtype's sums and products."""
    numel = 1
    for d in shape:
        numel *= d
    v = (torch.arange(numel, dtype=torch.int64) * 7 + rank * 3 + salt) % 5 + 1
    if dtype == torch.bool:
        v = v % 2 == 0
    elif dtype.is_complex:
        v = torch.complex(v.double(), -v.double())
    return v.to(dtype).reshape(shape).to(device)


def same(name, got, want, exact=True):
    """Compare on the CPU (``got`` may be on the GPU); a mismatch is a FAIL line."""
    global checked
    checked += 1
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    try:
        assert len(got) == len(want), f"{len(got)} tensors, expected {len(want)}"
        for g, w in zip(got, want):
            g, w = g.cpu(), w.cpu()
            assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
            if exact:
                assert torch.equal(g, w), f"\n got  {g}\n want {w}"
            else:
                tol = 2e-2 if g.dtype in (torch.float16, torch.bfloat16) else 1e-5
                assert torch.allclose(g, w, rtol=tol, atol=tol), f"\n got  {g}\n want {w}"
    except AssertionError as e:
        failures.append(f"FAIL rank {R} {name}: {e}")


def case(fn):
    try:
        fn()
    except Exception:
        failures.append(f"FAIL rank {R} {fn.__name__}: {traceback.format_exc()}")
    return fn


def both(run):
    """``run(group, device)`` on forestcc with tensors on DEV and on gloo with CPU tensors."""
    return run(FCC, DEV), run(GLOO, torch.device("cpu"))


def reference(opname, dtype, shape, salt=0):
    """Every rank's input reduced here, in 64 bits, then cast (wrapping, as fixed-width adds
    and multiplies do)."""
    wide = torch.stack([data(r, shape, dtype, salt, "cpu").to(
        torch.float64 if dtype.is_floating_point else torch.int64) for r in range(N)])
    v = {"SUM": lambda: wide.sum(0), "PRODUCT": lambda: wide.prod(0),
         "MIN": lambda: wide.min(0).values, "MAX": lambda: wide.max(0).values,
         "AVG": lambda: wide.mean(0)}[opname]()
    return v.bool() if dtype == torch.bool else v.to(dtype)


def finish():
    for line in failures:
        print(line, flush=True)
    print(f"CHECKED {checked}", flush=True)
    dist.destroy_process_group()
    if failures:
        sys.exit(1)
    print("OK", flush=True)
    sys.exit(0)


OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX}


def premul_sum(t, want):
    """all_reduce ``t`` with PREMUL_SUM(0.5) and compare with ``want``; with a torch that does
    not show the factor to Python backends, the call must be refused, naming the torch version."""
    if PREMUL_SUM_SUPPORTED:
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=FCC)
        same(f"all_reduce PREMUL_SUM {t.dtype}", t, want, exact=False)
        return
    global checked
    checked += 1
    try:
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=FCC)
        failures.append(f"FAIL rank {R} PREMUL_SUM {t.dtype}: not refused by torch "
                        f"{torch.__version__}, whose factor forestcc cannot read")
    except NotImplementedError as e:
        if f"torch {torch.__version__}" not in str(e):
            failures.append(f"FAIL rank {R} PREMUL_SUM refusal does not name the torch version: {e}")


def ops_mode():
    @case
    def all_reduce_dtypes_and_ops():
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                      torch.uint8, torch.int32, torch.int64, torch.int16, torch.bool):
            for opname, op in OPS.items():
                t = data(R, (3, 5), dtype)
                dist.all_reduce(t, op=op, group=FCC)
                same(f"all_reduce {dtype} {opname}", t, reference(opname, dtype, (3, 5)),
                     exact=dtype not in (torch.float16, torch.bfloat16))
        for dtype in (torch.float32, torch.bfloat16, torch.complex64):
            t = data(R, (7,), dtype)
            dist.all_reduce(t, op=dist.ReduceOp.AVG, group=FCC)
            ref = data(R, (7,), dtype, device="cpu")
            dist.all_reduce(ref, group=GLOO)
            same(f"all_reduce AVG {dtype}", t, ref / N, exact=False)
            t = data(R, (7,), dtype)
            premul_sum(t, ref * 0.5)

    @case
    def all_reduce_layouts_and_sizes():
        def run(g, dev):
            base = data(R, (4, 6), torch.float32, device=dev)
            cols = base[:, ::2].contiguous()  # gloo reduces views wrongly: reduce a copy there
            dist.all_reduce(base[:, ::2] if g is FCC else cols, group=g)
            if g is not FCC:
                base[:, ::2] = cols
            scalar = torch.tensor(float(R + 1), device=dev)
            dist.all_reduce(scalar, group=g)
            empty = torch.empty(0, device=dev)
            dist.all_reduce(empty, group=g)
            big = data(R, (1 << 20,), torch.float32, device=dev)  # 4 MiB
            dist.all_reduce(big, group=g)
            return [base, scalar, empty, big]
        f, gl = both(run)
        same("all_reduce non-contiguous / 0-dim / empty / 4 MiB", f, gl)

    @case
    def async_works_futures_and_streams():
        ref = data(R, (1000,), torch.float32, device="cpu")
        dist.all_reduce(ref, group=GLOO)
        t = data(R, (1000,), torch.float32)
        work = dist.all_reduce(t, async_op=True, group=FCC)
        chained = work.get_future().then(lambda fut: fut.value()[0] * 2)
        work.wait()
        same("all_reduce async", t, ref)
        same("future value", work.get_future().value()[0], ref)
        same("future then", chained.wait(), ref * 2)
        if DEV.type == "cuda":
            torch.cuda.synchronize()
        assert work.is_completed() and work.is_success() and work.exception() is None
        # several in flight, waited in reverse
        ts = [data(R, (100 + i,), torch.float32, i) for i in range(5)]
        works = [dist.all_reduce(x, async_op=True, group=FCC) for x in ts]
        for w in reversed(works):
            w.wait()
        same("5 in flight", ts, [reference("SUM", torch.float32, (100 + i,), i) for i in range(5)])
        if DEV.type != "cuda":
            return
        # made on a side stream right after a kernel that writes the input there, then waited
        # for from the default stream: the result must be the reduction of what the kernel wrote
        side = torch.cuda.Stream()
        x = torch.zeros(1 << 16, device=DEV)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)  # keep the side stream busy: the fill runs late
            x.fill_(R + 1.0)
            w = dist.all_reduce(x, async_op=True, group=FCC)
        w.wait()  # the default stream now waits for the side stream's call
        y = x * 1  # on the default stream
        same("side stream then wait()", y, torch.full((1 << 16,), N * (N + 1) / 2))
        # a DDP-style hook chain: then() on the future of a call made on a side stream
        with torch.cuda.stream(side):
            z = torch.full((10,), float(R), device=DEV)
            fut = dist.all_reduce(z, async_op=True, group=FCC).get_future()
        scaled = fut.then(lambda f: f.value()[0] / N).wait()
        same("side stream future then", scaled, torch.full((10,), (N - 1) / 2))

    @case
    def coalesced():
        def run(g, dev):
            ts = [data(R, (3,), torch.float32, device=dev),
                  data(R, (2, 2), torch.float32, 1, device=dev),
                  data(R, (5,), torch.int64, 2, device=dev)]
            if g is FCC:
                with dist._coalescing_manager(group=g, async_ops=True) as cm:
                    for x in ts:
                        dist.all_reduce(x, group=g)
                cm.wait()
                FCC.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions()).wait()
            else:
                for x in ts + ts:
                    dist.all_reduce(x, group=g)
            return ts
        f, gl = both(run)
        same("all_reduce coalesced", f, gl)

    @case
    def broadcast_and_reduce_every_root():
        for root in range(N):
            def run(g, dev, root=root):
                t = data(R, (2, 3), torch.float32, device=dev)
                nc = data(R, (4, 4), torch.float32, device=dev)[::2, 1:]
                nc = nc if g is FCC else nc.contiguous()
                dist.broadcast(t, root, group=g)
                dist.broadcast(nc, root, group=g)
                b = data(R, (5,), torch.int64, device=dev)
                dist.broadcast(b, root, group=g)
                return [t, nc.contiguous(), b]
            f, gl = both(run)
            same(f"broadcast root {root}", f, gl)
            for opname, op in OPS.items():
                t = data(R, (9,), torch.float32)
                dist.reduce(t, root, op=op, group=FCC)
                want = reference(opname, torch.float32, (9,)) if R == root else data(R, (9,), torch.float32)
                same(f"reduce root {root} {opname}", t, want)

    @case
    def gathers():
        def run(g, dev):
            x = data(R, (2, 3), torch.float32, device=dev)
            outs = [torch.empty(2, 3, device=dev) for _ in range(N)]
            dist.all_gather(outs, x, group=g)
            flat = torch.empty(N * 2, 3, device=dev)
            dist.all_gather_into_tensor(flat, x, group=g)
            inplace = torch.zeros(N * 4, device=dev)
            inplace[R * 4:(R + 1) * 4] = data(R, (4,), torch.float32, 5, device=dev)
            dist.all_gather_into_tensor(inplace, inplace[R * 4:(R + 1) * 4], group=g)
            res = outs + [flat, inplace]
            for root in range(N):
                gl = [torch.empty(2, 3, device=dev) for _ in range(N)] if R == root else None
                dist.gather(x, gl, dst=root, group=g)
                res += gl or []
            return res
        f, gl = both(run)
        same("all_gather / into_tensor / in place / gather", f, gl)
        ins = [data(R, (3,), torch.float32), data(R, (2, 2), torch.float32, 1)]
        outs = [torch.empty(N * 3, device=DEV), torch.empty(N * 2, 2, device=DEV)]
        with dist._coalescing_manager(group=FCC, async_ops=True) as cm:
            for o, x in zip(outs, ins):
                dist.all_gather_into_tensor(o, x, group=FCC)
        cm.wait()
        same("all_gather_into_tensor coalesced", outs,
             [torch.cat([data(r, (3,), torch.float32, device="cpu") for r in range(N)]),
              torch.cat([data(r, (2, 2), torch.float32, 1, "cpu") for r in range(N)])])

    @case
    def scatters_and_reduce_scatters():
        for root in range(N):
            def run(g, dev, root=root):
                out = torch.empty(2, 2, device=dev)
                ins = [data(p, (2, 2), torch.float32, 7, dev) for p in range(N)] if R == root else None
                dist.scatter(out, ins, src=root, group=g)
                return [out]
            f, gl = both(run)
            same(f"scatter root {root}", f, gl)
        for dtype in (torch.float32, torch.bfloat16, torch.int32):
            exact = dtype != torch.bfloat16
            out = torch.empty(3, dtype=dtype, device=DEV)
            dist.reduce_scatter(out, [data(R, (3,), dtype, p) for p in range(N)], group=FCC)
            same(f"reduce_scatter list {dtype}", out, reference("SUM", dtype, (3,), R), exact)
            out = torch.empty(3, dtype=dtype, device=DEV)
            whole = data(R, (N * 3,), dtype)
            dist.reduce_scatter_tensor(out, whole, group=FCC)
            same(f"reduce_scatter_tensor {dtype}", out,
                 reference("SUM", dtype, (N * 3,))[R * 3:(R + 1) * 3], exact)
        outs = [torch.empty(2, device=DEV), torch.empty(3, device=DEV)]
        with dist._coalescing_manager(group=FCC, async_ops=True) as cm:
            for o in outs:
                dist.reduce_scatter_tensor(o, data(R, (N * o.numel(),), torch.float32, o.numel()),
                                           op=dist.ReduceOp.AVG, group=FCC)
        cm.wait()
        same("reduce_scatter_tensor coalesced AVG", outs,
             [reference("AVG", torch.float64, (N * k,), k)[R * k:(R + 1) * k].float()
              for k in (2, 3)], exact=False)

    @case
    def all_to_alls():
        def run(g, dev):
            src = data(R, (N * 2, 3), torch.float32, device=dev)
            out = torch.empty(N * 2, 3, device=dev)
            dist.all_to_all_single(out, src, group=g)
            ins = [data(R, (2,), torch.float32, p, dev) for p in range(N)]
            outs = [torch.empty(2, device=dev) for _ in range(N)]
            if g is FCC:
                dist.all_to_all(outs, ins, group=g)
            else:  # gloo has no list all_to_all in some torch versions (2.11): computed here
                outs = [data(p, (2,), torch.float32, R, dev) for p in range(N)]
            vsrc = data(R, (sum(p + 1 for p in range(N)), 2), torch.float32, 3, dev)
            vout = torch.empty(N * (R + 1), 2, device=dev)
            dist.all_to_all_single(vout, vsrc, [R + 1] * N, [p + 1 for p in range(N)], group=g)
            return [out, *outs, vout]
        f, gl = both(run)
        same("all_to_all_single / lists / with splits", f, gl)

    @case
    def barrier_and_sub_groups():
        dist.barrier(group=FCC)
        dist.barrier(group=FCC, async_op=True).wait()
        evens = [r for r in range(N) if r % 2 == 0]
        odds = [r for r in range(N) if r % 2 == 1]
        groups = {}
        for ranks in (evens, odds):
            if ranks:
                groups[tuple(ranks)] = dist.new_group(ranks, backend="forestcc")
        mine = evens if R % 2 == 0 else odds
        sub = groups[tuple(mine)]
        t = data(R, (6,), torch.float32)
        dist.all_reduce(t, group=sub)
        want = sum(data(r, (6,), torch.float32, device="cpu") for r in mine)
        same(f"sub-group {mine} all_reduce", t, want)
        b = data(R, (3,), torch.int64)
        dist.broadcast(b, mine[-1], group=sub)
        same(f"sub-group {mine} broadcast", b, data(mine[-1], (3,), torch.int64, device="cpu"))
        # the world group still works between sub-group calls
        w = torch.ones(2, device=DEV)
        dist.all_reduce(w, group=FCC)
        same("world after sub-group", w, torch.full((2,), float(N)))
        for g in groups.values():
            if R in dist.get_process_group_ranks(g):
                dist.destroy_process_group(g)

    finish()


def errors_mode():
    x = torch.ones(4, device=DEV)
    for what, fn in (
            ("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(
                torch.empty(N * 4), x, group=FCC)),
            ("all_gather", lambda: dist.all_gather(
                [torch.empty(4, device=DEV)] * (N - 1) + [torch.empty(4)], x, group=FCC))):
        try:
            fn()
            print(f"LOCAL none {what} was not refused", flush=True)
        except Exception as e:
            print(f"LOCAL {type(e).__name__} {e}", flush=True)
    y = torch.ones(2, device=DEV)
    dist.all_reduce(y, group=FCC)  # the group still works after refused calls
    torch.cuda.synchronize() if DEV.type == "cuda" else None
    print(f"AFTER {y.cpu().tolist()}", flush=True)
    try:
        z = torch.ones(4 + R, device=DEV)  # shapes differ between ranks
        dist.all_reduce(z, group=FCC)
        if DEV.type == "cuda":
            FCC.communicator.synchronize()
        dist.all_reduce(z, group=FCC)  # raised by the next call, if not before
        print("ERROR none the mismatch was not reported", flush=True)
    except Exception as e:
        print(f"ERROR {type(e).__name__} {e}".replace("\n", " "), flush=True)
    sys.stdout.flush()
    os._exit(0)  # the communicator is poisoned: skip destroy_process_group


def p2p_mode():
    if N > 1:
        nxt, prv = (R + 1) % N, (R - 1) % N
        x = data(R, (4, 4), torch.float32)
        got = torch.empty(4, 4, device=DEV)
        ops = [dist.P2POp(dist.isend, x, nxt, group=FCC),
               dist.P2POp(dist.irecv, got, prv, group=FCC)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same("batch_isend_irecv ring", got, data(prv, (4, 4), torch.float32, device="cpu"))
        y = torch.zeros(4, 8, device=DEV)
        w = dist.isend(x, nxt, group=FCC)
        dist.recv(y[:, ::2], prv, group=FCC)
        w.wait()
        same("isend / recv non-contiguous", y[:, ::2], data(prv, (4, 4), torch.float32, device="cpu"))
        fut = dist.irecv(torch.empty(3, device=DEV), prv, group=FCC)
        dist.send(data(R, (3,), torch.float32, 1), nxt, group=FCC)
        fut.wait()
        same("irecv future", fut.get_future().value()[0], data(prv, (3,), torch.float32, 1, "cpu"))
        # a coalesced block with a device (torch's batch_isend_irecv on CUDA in some versions):
        # its one Work covers every call of the block, sends and receives alike
        got = torch.zeros(1 << 16, device=DEV)
        with dist._coalescing_manager(group=FCC, device=DEV, async_ops=True) as cm:
            dist.isend(data(R, (1 << 16,), torch.float32, 2), nxt, group=FCC)
            dist.irecv(got, prv, group=FCC)
        cm.wait()
        same("coalesced isend / irecv", got, data(prv, (1 << 16,), torch.float32, 2, "cpu"))
        both_futures = cm.works[0].get_future().wait()
        same("coalesced future", both_futures[1], got)
    finish()


def string_mode():
    pg = FCC
    assert isinstance(pg, forestcc.torch.ProcessGroupForestcc), type(pg)
    for dev in ("cpu", DEV):
        t = torch.full((5,), float(R), device=dev)
        dist.all_reduce(t)
        same(f"all_reduce on {dev} with cpu:gloo,cuda:forestcc", t,
             torch.full((5,), N * (N - 1) / 2))
    finish()


{"ops": ops_mode, "errors": errors_mode, "p2p": p2p_mode, "string": string_mode}[MODE]()
