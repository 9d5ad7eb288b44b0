"""DDP and FSDP2 training on the forestcc backend against the same training on gloo.

Two copies of one model train side by side on the same per-rank batches: one wrapped with the
forestcc world group, one with a gloo group of the same ranks. After every step their gradients
(DDP) or losses (FSDP2) and, at the end, their parameters must agree (bitwise on 1 and 2 ranks;
within float32 rounding on more, where the two libraries may add in different orders). Runs
under forestcc-run, torchrun or mpirun. Prints "CHECKED n" and "OK", or "FAIL ..." lines.
"""
import copy
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
from torch import nn

import forestcc.torch  # noqa: F401 - registers the backend

dist.init_process_group("forestcc")
R, N = dist.get_rank(), dist.get_world_size()
FCC = dist.group.WORLD
GLOO = dist.new_group(backend="gloo")
EXACT = N <= 2
STEPS = 3
checked = 0
failures = []


def agree(name, a, b, rtol=1e-5):
    """a == b, bitwise on up to 2 ranks, else within ``rtol``."""
    global checked
    checked += 1
    ok = torch.equal(a, b) if EXACT else torch.allclose(a, b, rtol=rtol, atol=rtol / 10)
    if not ok:
        failures.append(f"FAIL rank {R} {name}: max difference {(a - b).abs().max().item()}")


def case(fn):
    t0 = time.perf_counter()
    try:
        fn()
        if os.environ.get("TORCH_OPS_TIMES"):
            print(f"TIME {fn.__name__} {time.perf_counter() - t0:.2f} s", flush=True)
    except Exception:
        failures.append(f"FAIL rank {R} {fn.__name__}: {traceback.format_exc()}")
    return fn


def model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 64),
                         nn.ReLU(), nn.Linear(64, 4))


def batch(step):
    g = torch.Generator().manual_seed(1000 * R + step)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


@case
def ddp_gradients_match_gloo():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    for variant in ("plain", "fp16_compress_hook", "gradient_as_bucket_view"):
        # forestcc adds float16 in float32, gloo in float16: on 3+ ranks they round apart
        rtol = 2e-3 if variant == "fp16_compress_hook" else 1e-5
        base = model(seed=R)  # different on every rank: DDP must broadcast rank 0's
        kwargs = dict(bucket_cap_mb=0.01)  # several buckets
        if variant == "gradient_as_bucket_view":
            kwargs["gradient_as_bucket_view"] = True
        wrapped = {}
        for name, group in (("forestcc", FCC), ("gloo", GLOO)):
            ddp = DDP(copy.deepcopy(base), process_group=group, **kwargs)
            if variant == "fp16_compress_hook":
                ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
            wrapped[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.1))
        for step in range(STEPS):
            x, y = batch(step)
            for ddp, opt in wrapped.values():
                opt.zero_grad()
                nn.functional.mse_loss(ddp(x), y).backward()
            (f, _), (g, _) = wrapped["forestcc"], wrapped["gloo"]
            for (pname, pf), pg in zip(f.module.named_parameters(), g.module.parameters()):
                agree(f"DDP {variant} step {step} grad {pname}", pf.grad, pg.grad, rtol)
            for _, opt in wrapped.values():
                opt.step()
        (f, _), (g, _) = wrapped["forestcc"], wrapped["gloo"]
        for (pname, pf), pg in zip(f.module.state_dict().items(), g.module.state_dict().values()):
            agree(f"DDP {variant} final {pname}", pf, pg, rtol)
        # every rank holds the same parameters
        flat = torch.cat([p.detach().reshape(-1) for p in f.module.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(N)]
        dist.all_gather(gathered, flat, group=FCC)
        for r in range(N):
            agree(f"DDP {variant} replica {r}", gathered[r], flat)


@case
def fsdp2_matches_gloo():
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))
    sharded = {}
    for name, group in (("forestcc", FCC), ("gloo", GLOO)):
        mesh = DeviceMesh.from_group(group, "cpu")
        m = copy.deepcopy(base)
        for layer in m:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
        sharded[name] = (m, torch.optim.Adam(m.parameters(), lr=0.01))
    for step in range(STEPS):
        x, y = batch(step)
        losses = {}
        for name, (m, opt) in sharded.items():
            opt.zero_grad()
            loss = nn.functional.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            losses[name] = loss.detach()
        agree(f"FSDP2 step {step} loss", losses["forestcc"], losses["gloo"])
    (mf, _), (mg, _) = sharded["forestcc"], sharded["gloo"]
    for (pname, pf), pg in zip(mf.named_parameters(), mg.parameters()):
        # full_tensor(): an all-gather through torch's functional collectives, by group name
        agree(f"FSDP2 final {pname}", pf.full_tensor(), pg.full_tensor())


for line in failures:
    print(line, flush=True)
print(f"CHECKED {checked}", flush=True)
dist.destroy_process_group()
if failures:
    sys.exit(1)
print("OK", flush=True)
