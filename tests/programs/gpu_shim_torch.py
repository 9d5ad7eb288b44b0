"""PyTorch's ProcessGroupNCCL on forestcc's NCCL shim: one rank of a job run as
``LD_PRELOAD=$(forestcc-config --nccl-shim) forestcc-run -n N python gpu_shim_torch.py SECTION DIR``,
every rank on cuda:0 (the real NCCL refuses two ranks on one GPU; the shim runs them through CUDA
IPC). Results are compared with a numpy reference (collectives) or with gloo on CPU copies (DDP).
Prints "OK <section> <rank>" when every check of the section passed, "FAIL ..." for each that did not.
``--stand-in`` (CI, no GPU) runs the same checks with gloo on CPU tensors, leaving out what only
NCCL has (AVG, PREMUL_SUM, the shim's presence), so the program and its references keep working.

Sections:
  collectives  all_reduce (dtypes x ops, AVG and PREMUL_SUM too), all_gather_into_tensor,
               reduce_scatter_tensor, broadcast from every root, barrier, a coalesced group, and
               that the NCCL symbols torch binds to are the shim's (interposed by LD_PRELOAD)
  a2a_splits   all_to_all_single with equal splits, and with uneven splits (zeros too), which
               torch issues as ncclSend/ncclRecv in one group; a batch_isend_irecv ring
  ddp          a DDP training step: gradients on cuda:0 through "nccl" equal gloo's on CPU copies
"""
from __future__ import annotations

import datetime
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

SECTION, DIR = sys.argv[1], sys.argv[2]
STAND_IN = "--stand-in" in sys.argv[3:]
RANK = int(os.environ["FORESTCC_RANK"])
SIZE = int(os.environ["FORESTCC_SIZE"])
DEVICE = torch.device("cpu") if STAND_IN else torch.device("cuda", 0)
TIMEOUT = datetime.timedelta(seconds=120)
failures = 0


def fail(what: str) -> None:
    global failures
    failures += 1
    print(f"FAIL rank {RANK}: {what}", flush=True)


def expect(what: str, got: torch.Tensor, want: np.ndarray, rtol: float = 0.0, atol: float = 0.0) -> None:
    g = got.detach().cpu().to(torch.float64).numpy() if got.dtype == torch.bfloat16 else got.detach().cpu().numpy()
    if g.shape != want.shape or not np.allclose(g.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol):
        bad = np.argwhere(~np.isclose(g.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol))
        fail(f"{what}: got {g.ravel()[:6]} ... want {want.ravel()[:6]} ... ({len(bad)} elements differ)")


def the_shim_is_loaded() -> None:
    """libtorch_cuda's NCCL calls reach forestcc's shim. Under LD_PRELOAD the wheel's libnccl.so.2
    is still mapped (libtorch_cuda's dependency), but the preload comes first in the global lookup
    scope, so every NCCL symbol libtorch_cuda binds to is the shim's: the global ncclGetVersion and
    ncclAllReduce must be the shim's own code, and the version the running library reports the
    shim's (torch.cuda.nccl.version() is the NCCL_MAJOR/MINOR/PATCH torch was compiled against,
    torch/csrc/cuda/nccl.cpp, so it says nothing about which library runs)."""
    import ctypes
    shim = os.environ.get("FORESTCC_EXPECT_SHIM", "")
    if not shim:
        fail("FORESTCC_EXPECT_SHIM is not set (the test names the shim it preloads)")
        return
    with open("/proc/self/maps") as maps:
        mapped = {os.path.realpath(line.split()[-1]) for line in maps if "libnccl" in line}
    if os.path.realpath(shim) not in mapped:
        fail(f"the shim {shim} is not mapped in this process (libnccl mapped: {sorted(mapped)})")
        return
    global_scope = ctypes.CDLL(None)
    own = ctypes.CDLL(shim)  # already loaded: the same handle, whose symbols are the shim's own
    for name in ("ncclGetVersion", "ncclCommInitRankConfig", "ncclAllReduce", "ncclSend"):
        found = ctypes.cast(getattr(global_scope, name), ctypes.c_void_p).value
        want = ctypes.cast(getattr(own, name), ctypes.c_void_p).value
        if found != want:
            fail(f"{name} in the global scope is at {found:#x}, not the shim's {want:#x}: the shim does not "
                 f"interpose (libnccl mapped: {sorted(mapped)})")
    version = ctypes.c_int(0)
    if global_scope.ncclGetVersion(ctypes.byref(version)) != 0 or version.value != 23203:
        fail(f"ncclGetVersion in the global scope reports {version.value}, expected the shim's 23203")


def inputs(rank: int, n: int, dtype: torch.dtype, op) -> np.ndarray:
    """Rank `rank`'s input: small integers, so every result is exact in every dtype."""
    i = np.arange(n)
    if op == dist.ReduceOp.PRODUCT:
        return (1 + (i + rank) % 2).astype(np.float64)
    return ((rank + 1) * (1 + i % 7)).astype(np.float64)


def reference(n: int, dtype: torch.dtype, op) -> np.ndarray:
    rows = np.stack([inputs(r, n, dtype, op) for r in range(SIZE)])
    if op == dist.ReduceOp.SUM:
        return rows.sum(0)
    if op == dist.ReduceOp.PRODUCT:
        return rows.prod(0)
    if op == dist.ReduceOp.MAX:
        return rows.max(0)
    if op == dist.ReduceOp.MIN:
        return rows.min(0)
    return rows.sum(0) / SIZE  # AVG (floating point only)


def on_gpu(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64).to(dtype).to(DEVICE)


def collectives() -> None:
    if not STAND_IN:
        the_shim_is_loaded()
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
              torch.uint8]
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MAX, dist.ReduceOp.MIN]
    if not STAND_IN:
        ops.append(dist.ReduceOp.AVG)  # NCCL's; gloo has none
    for dtype in dtypes:
        for op in ops:
            if op == dist.ReduceOp.AVG and not dtype.is_floating_point:
                continue  # integer AVG truncates in NCCL: tests/nccl/device_check.c checks it
            for n in (1, 37, 4096):
                x = on_gpu(inputs(RANK, n, dtype, op), dtype)
                dist.all_reduce(x, op=op)
                tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) and op == dist.ReduceOp.AVG else 0
                expect(f"all_reduce {dtype} {op} n={n}", x, reference(n, dtype, op), rtol=tol)
    big = on_gpu(inputs(RANK, 1 << 22, torch.float32, dist.ReduceOp.SUM), torch.float32)
    dist.all_reduce(big)
    expect("all_reduce float32 4M", big, reference(1 << 22, torch.float32, dist.ReduceOp.SUM))

    # PREMUL_SUM: a factor given as a number (NCCL's host scalar) and as a tensor (a device scalar)
    for factor in () if STAND_IN else (2.0, torch.tensor([2.0], device=DEVICE)):
        x = on_gpu(inputs(RANK, 64, torch.float32, dist.ReduceOp.SUM), torch.float32)
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor))
        expect(f"all_reduce PREMUL_SUM factor {type(factor).__name__}", x,
               2.0 * reference(64, torch.float32, dist.ReduceOp.SUM))

    n = 1000
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        mine = on_gpu(inputs(RANK, n, dtype, dist.ReduceOp.SUM), dtype)
        gathered = torch.empty(SIZE * n, dtype=dtype, device=DEVICE)
        dist.all_gather_into_tensor(gathered, mine)
        expect(f"all_gather_into_tensor {dtype}", gathered,
               np.concatenate([inputs(r, n, dtype, dist.ReduceOp.SUM) for r in range(SIZE)]))
        full = on_gpu(inputs(RANK, SIZE * n, dtype, dist.ReduceOp.SUM), dtype)
        part = torch.empty(n, dtype=dtype, device=DEVICE)
        dist.reduce_scatter_tensor(part, full)
        want = reference(SIZE * n, dtype, dist.ReduceOp.SUM)[RANK * n:(RANK + 1) * n]
        expect(f"reduce_scatter_tensor {dtype}", part, want)

    for root in range(SIZE):
        x = on_gpu(inputs(RANK, 333, torch.float32, dist.ReduceOp.SUM), torch.float32)
        dist.broadcast(x, src=root)
        expect(f"broadcast root {root}", x, inputs(root, 333, torch.float32, dist.ReduceOp.SUM))

    # several collectives as one NCCL group (torch coalesces them: ncclGroupStart/End)
    tensors = [on_gpu(inputs(RANK, k + 5, torch.float32, dist.ReduceOp.SUM), torch.float32) for k in range(4)]
    if STAND_IN:
        for t in tensors:
            dist.all_reduce(t)
    else:
        with dist._coalescing_manager(device=DEVICE):
            for t in tensors:
                dist.all_reduce(t)
    for k, t in enumerate(tensors):
        expect(f"coalesced all_reduce {k}", t, reference(k + 5, torch.float32, dist.ReduceOp.SUM))

    dist.barrier(device_ids=None if STAND_IN else [0])
    synchronize()


def synchronize() -> None:
    if not STAND_IN:
        torch.cuda.synchronize()


def a2a_splits() -> None:
    # equal splits: ncclAlltoAll, or a group of ncclSend/ncclRecv, depending on torch's build
    n = 100
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        src = on_gpu(np.array([r * 10000 + RANK * 100 + i for r in range(SIZE) for i in range(n)]), dtype)
        dst = torch.empty_like(src)
        dist.all_to_all_single(dst, src)
        want = np.array([RANK * 10000 + r * 100 + i for r in range(SIZE) for i in range(n)])
        expect(f"all_to_all_single equal splits {dtype}", dst, on_gpu(want, dtype).cpu().to(torch.float64).numpy())
    # rank f sends (f + t) % 3 * 5 elements to rank t (zeros included)
    send_splits = [(RANK + t) % 3 * 5 for t in range(SIZE)]
    recv_splits = [(f + RANK) % 3 * 5 for f in range(SIZE)]
    src = torch.tensor([RANK * 1000 + t * 10 + i for t in range(SIZE) for i in range(send_splits[t])],
                       dtype=torch.float32, device=DEVICE)
    dst = torch.full((sum(recv_splits),), -1.0, device=DEVICE)
    dist.all_to_all_single(dst, src, output_split_sizes=recv_splits, input_split_sizes=send_splits)
    want = np.array([f * 1000 + RANK * 10 + i for f in range(SIZE) for i in range(recv_splits[f])], dtype=np.float64)
    expect("all_to_all_single with splits", dst, want)
    # and point to point: a ring
    x = torch.full((100,), float(RANK), device=DEVICE)
    y = torch.empty(100, device=DEVICE)
    ops = [dist.P2POp(dist.isend, x, (RANK + 1) % SIZE), dist.P2POp(dist.irecv, y, (RANK - 1) % SIZE)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    expect("batch_isend_irecv ring", y, np.full(100, float((RANK - 1) % SIZE)))
    synchronize()


def ddp() -> None:
    gloo = dist.new_group(backend="gloo", timeout=TIMEOUT)
    torch.manual_seed(1234)  # the same initial weights on every rank and both copies
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    cpu_model.load_state_dict(model.state_dict())
    gpu = torch.nn.parallel.DistributedDataParallel(model.to(DEVICE), device_ids=None if STAND_IN else [0])
    ref = torch.nn.parallel.DistributedDataParallel(cpu_model, process_group=gloo)
    gen = torch.Generator().manual_seed(100 + RANK)  # each rank its own batch
    for step in range(3):
        data = torch.randn(8, 16, generator=gen)
        target = torch.randn(8, 4, generator=gen)
        for net, dev in ((gpu, DEVICE), (ref, torch.device("cpu"))):
            net.zero_grad()
            loss = torch.nn.functional.mse_loss(net(data.to(dev)), target.to(dev))
            loss.backward()
        for (name, p), q in zip(gpu.module.named_parameters(), ref.module.parameters()):
            if not torch.allclose(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5):
                fail(f"DDP step {step}: the gradient of {name} differs from gloo's by "
                     f"{(p.grad.cpu() - q.grad).abs().max().item():.3g}")
        with torch.no_grad():  # the same update on both, so the next step starts equal again
            for p, q in zip(gpu.module.parameters(), ref.module.parameters()):
                p -= 0.1 * p.grad
                q -= 0.1 * q.grad
    synchronize()


def main() -> int:
    if not STAND_IN:
        torch.cuda.set_device(DEVICE)
    dist.init_process_group("gloo" if STAND_IN else "nccl", init_method=f"file://{DIR}/pg", rank=RANK,
                            world_size=SIZE, timeout=TIMEOUT)
    {"collectives": collectives, "a2a_splits": a2a_splits, "ddp": ddp}[SECTION]()
    # every rank is done before any tears down (the file store goes with the last rank)
    dist.barrier(device_ids=None if STAND_IN else [0])
    dist.destroy_process_group()
    if failures:
        return 1
    print(f"OK {SECTION} {RANK}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
