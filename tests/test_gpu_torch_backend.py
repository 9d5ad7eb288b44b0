"""The forestcc torch.distributed backend on CUDA tensors (issue 17): every ProcessGroup operation
against gloo on CPU copies, DDP and FSDP2 against gloo on the CPU, async works and futures on
streams, sub-groups, refused and mismatched calls, send/recv, "cpu:gloo,cuda:forestcc" and the
example with ``--device cuda``, on 2 and 3 processes sharing one GPU.

Tests marked ``gpu`` skip with the reason where no GPU is visible (tests/test_gpu.py decides).
Everywhere (the CI) the same programs run with ``--device cpu`` under
tests/programs/torch_gpu_fake_streams.py, which sends the CPU tensors through the backend's CUDA
path with host stand-ins for streams, events and CUDA futures. On a GPU machine:
tools/gpu-suite.sh.
"""
import subprocess
import sys

import pytest
from conftest import PROGRAMS, run_job
from test_gpu import JOB_TIMEOUT, gpu_only, tail
from test_torch_backend import EXAMPLE

OPS = "torch_gpu_ops.py"
TRAINING = "torch_gpu_training.py"
ENV = {"OMP_NUM_THREADS": "1"}


def passed(res, n: int) -> None:
    """Every rank printed "OK" and no FAIL line, with a real number of checks."""
    assert res.returncode == 0 and not res.lines("FAIL"), tail(res)
    assert len(res.lines("OK")) == n, tail(res)
    assert all(int(c.split()[1]) > 0 for c in res.lines("CHECKED")), tail(res)


# -- runs everywhere (CI): the programs on CPU tensors, through the CUDA path ------------------

FAKE = "torch_gpu_fake_streams.py"


def path_counts(res) -> list[dict[str, int]]:
    """The "PATH k=v ..." line of each rank (torch_gpu_fake_streams.py)."""
    return [{k: int(v) for k, v in (w.split("=") for w in ln.split()[1:])}
            for ln in res.lines("PATH ")]


@pytest.mark.parametrize("program,args,n,used", [
    (OPS, ("ops",), 3, "enqueued"),
    (OPS, ("p2p",), 2, "launched"),
    (TRAINING, (), 2, "futures"),
], ids=["ops-3", "p2p-2", "ddp-fsdp2-2"])
def test_cuda_path_with_host_streams(program, args, n, used, no_new_shm):
    """The GPU programs' checks with CPU tensors taking the CUDA path (host stand-ins for
    streams, events and CUDA futures): every call went through it."""
    res = run_job(n, FAKE, str(PROGRAMS / program), *args, "--device", "cpu", env=ENV)
    passed(res, n)
    counts = path_counts(res)
    assert len(counts) == n and all(c[used] > 0 and c["waited"] > 0 for c in counts), counts


def test_cpu_gloo_cuda_forestcc_string_on_cpu(no_new_shm):
    passed(run_job(2, OPS, "string", "--device", "cpu", env=ENV), 2)


def test_tensors_on_two_devices_are_refused():
    """The mixed-device check, with a meta tensor standing in for a GPU's (no rank is needed)."""
    code = ("import torch\nfrom forestcc.torch.tensors import call_device\n"
            "try:\n"
            "    call_device('allgather', [('input', torch.ones(2)),"
            " ('output_list[1]', torch.ones(2, device='meta'))])\n"
            "except TypeError as e:\n    print('REFUSED', e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    assert ("REFUSED forestcc allgather: output_list[1] is on meta but input is on cpu"
            in p.stdout), p.stdout


# -- GPU ---------------------------------------------------------------------------------------

@gpu_only
@pytest.mark.parametrize("n", [2, 3])
def test_every_operation_on_cuda_matches_gloo(n):
    passed(run_job(n, OPS, "ops", env=ENV, timeout=JOB_TIMEOUT), n)


@gpu_only
def test_ddp_and_fsdp2_on_cuda_match_gloo():
    passed(run_job(2, TRAINING, env=ENV, timeout=JOB_TIMEOUT), 2)


@gpu_only
def test_mixed_devices_refused_and_mismatch_raised():
    res = run_job(2, OPS, "errors", env=ENV, timeout=JOB_TIMEOUT)
    assert res.returncode == 0, tail(res)
    local = res.lines("LOCAL ")
    assert len(local) == 4, tail(res)
    for ln in local:
        assert ln.startswith(("LOCAL ArgumentTypeError forestcc all_gather_into_tensor: ",
                              "LOCAL ArgumentTypeError forestcc allgather: ")), ln
        assert "is on cpu but" in ln or "is on cuda:0 but" in ln, ln
        assert "must all be on the CPU or all on the same GPU" in ln, ln
    assert res.lines("AFTER") == ["AFTER [2.0, 2.0]"] * 2, tail(res)
    errors = res.lines("ERROR ")
    assert len(errors) == 2, tail(res)
    for ln in errors:
        assert ln.startswith("ERROR DistBackendError forestcc allreduce"), ln


@gpu_only
@pytest.mark.parametrize("n", [2, 3])
def test_send_recv_on_cuda(n):
    """Needs send/recv of GPU memory in forestcc's bindings (the gpu-p2p branch)."""
    passed(run_job(n, OPS, "p2p", env=ENV, timeout=JOB_TIMEOUT), n)


@gpu_only
def test_cpu_gloo_cuda_forestcc_string():
    passed(run_job(2, OPS, "string", env=ENV, timeout=JOB_TIMEOUT), 2)


@gpu_only
def test_example_on_cuda():
    res = run_job(2, str(EXAMPLE), "--device", "cuda", "--steps", "3", env=ENV,
                  timeout=JOB_TIMEOUT)
    assert res.returncode == 0, tail(res)
    assert "2 ranks" in res.stdout and "on cuda" in res.stdout, tail(res)
    assert "step 3 loss" in res.stdout and "done: median step" in res.stdout, tail(res)
