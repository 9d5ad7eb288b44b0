"""A small DistributedDataParallel training loop on forestcc (or gloo, to compare).

    torchrun --nproc-per-node 2 examples/ddp_train.py --backend forestcc
    forestcc-run -n 2 python examples/ddp_train.py --backend forestcc
    mpirun -n 2 python examples/ddp_train.py --backend gloo
    forestcc-run -n 2 python examples/ddp_train.py --device cuda     # ranks may share one GPU

The only forestcc-specific line is ``import forestcc.torch``: it registers the backend
"forestcc" and lets ``init_process_group``'s default ``env://`` find the ranks under forestcc-run
and mpirun as well as under torchrun. Each rank fits a random linear map with an MLP on its own
synthetic batches; DDP averages the gradients. Rank 0 prints the loss (averaged over the ranks)
and the time per step.

With ``--device cuda`` the model and batches live on GPU ``LOCAL_RANK % device_count`` (several
ranks share one GPU when there are more ranks than GPUs: start CUDA MPS for speed, see
docs/gpu.md); forestcc then moves the gradients GPU to GPU. gloo on CUDA is not offered here
(it stages through the host).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import forestcc.torch  # noqa: F401 - registers the backend "forestcc"


def parse_args() -> argparse.Namespace:
    """Command-line flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="forestcc", choices=["forestcc", "gloo"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64, help="samples per rank and step")
    p.add_argument("--width", type=int, default=512, help="hidden layer width")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="where the model, the batches and the gradients live")
    args = p.parse_args()
    if args.device == "cuda" and args.backend != "forestcc":
        p.error("--device cuda needs --backend forestcc")
    return args


def pick_device(kind: str) -> torch.device:
    """The CPU, or this rank's GPU (LOCAL_RANK modulo the GPUs), made current."""
    if kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA GPU is visible to PyTorch")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def make_model(width: int) -> nn.Module:
    """A three-layer MLP from 64 features to 16 outputs."""
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 16))


def main() -> None:
    """Train for ``--steps`` steps and print the loss and step time on rank 0."""
    args = parse_args()
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = pick_device(args.device)

    torch.manual_seed(0)  # the same target on every rank; DDP broadcasts rank 0's weights
    target = torch.randn(64, 16).to(device)
    model = DDP(make_model(args.width).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    data = torch.Generator().manual_seed(1 + rank)  # each rank its own samples
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"backend {args.backend}: {world} ranks, {params} parameters on {args.device}",
              flush=True)

    times = []
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        x = torch.randn(args.batch, 64, generator=data).to(device)
        loss = nn.functional.mse_loss(model(x), x @ target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the step's GPU work, in its time
        times.append(time.perf_counter() - start)
        report = loss.detach().clone()
        dist.all_reduce(report, op=dist.ReduceOp.SUM)
        if rank == 0 and (step == 1 or step % 5 == 0 or step == args.steps):
            print(f"step {step} loss {report.item() / world:.4f} "
                  f"({times[-1] * 1e3:.1f} ms)", flush=True)
    if rank == 0:
        steady = sorted(times[1:] or times)[len(times[1:] or times) // 2]
        print(f"done: median step {steady * 1e3:.2f} ms on backend {args.backend}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
