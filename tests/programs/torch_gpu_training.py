"""DDP and FSDP2 on CUDA with the forestcc backend, against the same training on gloo on the CPU.

Two copies of one model train side by side on the same per-rank batches: one on the GPU (or
``--device cpu``: on the CPU, for machines without one) wrapped with the forestcc world group,
one on the CPU with a gloo group of the same ranks. After every step their gradients (DDP) or
losses (FSDP2) and, at the end, their parameters must agree within float32 rounding (a GPU and
a CPU compute the layers themselves in different orders). Ranks may share one GPU.
Prints "CHECKED n" and "OK", or "FAIL ..." lines.

argv: [--device cuda|cpu]
"""
import copy
import os
import sys
import traceback

import torch
import torch.distributed as dist
from torch import nn

import forestcc.torch  # noqa: F401 - registers the backend

KIND = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"
if KIND == "cuda":
    local = int(os.environ.get("FORESTCC_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
    DEV = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(DEV)
    # float32 matmuls in full precision on both sides
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
else:
    DEV = torch.device("cpu")
CPU = torch.device("cpu")

dist.init_process_group("forestcc")
R, N = dist.get_rank(), dist.get_world_size()
FCC = dist.group.WORLD
GLOO = dist.new_group(backend="gloo")
STEPS = 4
checked = 0
failures = []


def agree(name, a, b, rtol=1e-4):
    global checked
    checked += 1
    a, b = a.detach().cpu(), b.detach().cpu()
    if not torch.allclose(a, b, rtol=rtol, atol=rtol / 10):
        failures.append(f"FAIL rank {R} {name}: max difference {(a - b).abs().max().item()}")


def case(fn):
    try:
        fn()
    except Exception:
        failures.append(f"FAIL rank {R} {fn.__name__}: {traceback.format_exc()}")
    return fn


def batch(step):
    g = torch.Generator().manual_seed(1000 * R + step)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


@case
def ddp_gradients_match_gloo():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    for variant in ("plain", "allreduce_hook", "gradient_as_bucket_view"):
        torch.manual_seed(R)  # different on every rank: DDP must broadcast rank 0's
        base = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                             nn.Linear(64, 4))
        kwargs = {"bucket_cap_mb": 0.01}  # several buckets
        if variant == "gradient_as_bucket_view":
            kwargs["gradient_as_bucket_view"] = True
        wrapped = {}
        for name, group, dev in (("forestcc", FCC, DEV), ("gloo", GLOO, CPU)):
            ids = [DEV.index] if dev.type == "cuda" else None
            ddp = DDP(copy.deepcopy(base).to(dev), device_ids=ids, process_group=group, **kwargs)
            if variant == "allreduce_hook":  # the future's then() chain of a comm hook
                ddp.register_comm_hook(group, default_hooks.allreduce_hook)
            wrapped[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.1), dev)
        for step in range(STEPS):
            x, y = batch(step)
            for ddp, opt, dev in wrapped.values():
                opt.zero_grad()
                nn.functional.mse_loss(ddp(x.to(dev)), y.to(dev)).backward()
            (f, _, _), (g, _, _) = wrapped["forestcc"], wrapped["gloo"]
            for (pname, pf), pg in zip(f.module.named_parameters(), g.module.parameters()):
                agree(f"DDP {variant} step {step} grad {pname}", pf.grad, pg.grad)
            for _, opt, _ in wrapped.values():
                opt.step()
        (f, _, _), (g, _, _) = wrapped["forestcc"], wrapped["gloo"]
        for (pname, pf), pg in zip(f.module.state_dict().items(), g.module.state_dict().values()):
            agree(f"DDP {variant} final {pname}", pf, pg)
        flat = torch.cat([p.detach().reshape(-1) for p in f.module.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(N)]
        dist.all_gather(gathered, flat, group=FCC)
        for r in range(N):  # every rank holds the same parameters
            agree(f"DDP {variant} replica {r}", gathered[r], flat, rtol=0)


@case
def fsdp2_matches_gloo():
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))
    sharded = {}
    for name, group, dev in (("forestcc", FCC, DEV), ("gloo", GLOO, CPU)):
        mesh = DeviceMesh.from_group(group, dev.type)
        m = copy.deepcopy(base).to(dev)
        for layer in m:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
        sharded[name] = (m, torch.optim.Adam(m.parameters(), lr=0.01), dev)
    for step in range(STEPS):
        x, y = batch(step)
        losses = {}
        for name, (m, opt, dev) in sharded.items():
            opt.zero_grad()
            loss = nn.functional.mse_loss(m(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            losses[name] = loss.detach()
        agree(f"FSDP2 step {step} loss", losses["forestcc"], losses["gloo"])
    (mf, _, _), (mg, _, _) = sharded["forestcc"], sharded["gloo"]
    for (pname, pf), pg in zip(mf.named_parameters(), mg.parameters()):
        agree(f"FSDP2 final {pname}", pf.full_tensor(), pg.full_tensor())


for line in failures:
    print(line, flush=True)
print(f"CHECKED {checked}", flush=True)
dist.destroy_process_group()
if failures:
    sys.exit(1)
print("OK", flush=True)
