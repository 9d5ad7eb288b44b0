"""Send/recv of GPU memory (issues 15 and 16): single messages and batches (send_recv) of CuPy
arrays and PyTorch CUDA tensors, 2 to 4 processes sharing one GPU through CUDA IPC, enqueued on
the caller's stream (docs/gpu.md, "Send and receive").

The rank program is tests/programs/gpu_p2p_check.py; its ``--lib numpy`` stand-in runs the same
checks on host memory, so the CI (no GPU) keeps the program and the host path working. Tests
marked ``gpu`` skip with the reason where no GPU is visible; on a GPU machine run
tools/gpu-suite.sh.
"""
from __future__ import annotations

import subprocess

import pytest
from conftest import collect, run_job, spawn_ranks
from test_gpu import JOB_TIMEOUT, gpu_param, tail

from forestcc import _C

FEATURES = ["dtypes", "ring", "many", "alltoallv", "reuse", "async", "stream"]
_jobs: dict = {}


def check_job(n: int, lib: str):
    """One run of gpu_p2p_check.py check per (n, lib), shared by the feature tests."""
    key = (n, lib)
    if key not in _jobs:
        try:
            _jobs[key] = run_job(n, "gpu_p2p_check.py", "check", "--lib", lib, timeout=JOB_TIMEOUT * 2)
        except subprocess.TimeoutExpired as e:
            _jobs[key] = e
    res = _jobs[key]
    if isinstance(res, Exception):
        pytest.fail(f"the check job ({n} ranks, {lib}) hung: {res}")
    return res


JOBS = [pytest.param(2, "numpy", id="numpy-2"), pytest.param(3, "numpy", id="numpy-3"),
        gpu_param(2, "torch", id="torch-2"), gpu_param(3, "torch", id="torch-3"),
        gpu_param(4, "torch", id="torch-4"), gpu_param(2, "cupy", id="cupy-2"),
        gpu_param(3, "cupy", id="cupy-3")]


@pytest.mark.timeout(JOB_TIMEOUT * 2 + 60)
@pytest.mark.parametrize("n,lib", JOBS)
@pytest.mark.parametrize("feature", FEATURES)
def test_feature(feature, n, lib):
    """dtypes: every dtype both ways around the ring (async send, blocking recv). ring: a batch,
    4 MiB a message. many: a batch of six messages of different sizes (zero too) with every rank,
    itself included, half of them slices of one allocation. alltoallv: uneven all_to_all as a
    batch. reuse: the sender overwrites its buffer on its stream right after send returned while
    the receiver's stream is held back, and the receiver reads at once data written late on the
    sender's stream. async: handles waited and polled, synchronize(). stream: stream= given."""
    res = check_job(n, lib)
    ok = [ln for ln in res.lines("OK ") if ln.split()[1] == feature]
    assert len(ok) == n, tail(res)


@pytest.mark.timeout(JOB_TIMEOUT + 60)
@pytest.mark.parametrize("lib", ["numpy", gpu_param("torch", id="torch"), gpu_param("cupy", id="cupy")])
def test_mismatches_raise_on_both_sides_and_the_pair_stays_usable(lib, no_new_shm):
    """Different sizes, GPU memory sent to host memory: the sender and the receiver each raise
    ValueError naming the other rank; then a good exchange works, and batches of different
    counts match message by message (a batch of two received in two, two sends received in one
    batch). Also stream= with host memory is refused (as for collectives)."""
    res = run_job(2, "gpu_p2p_check.py", "mismatch", "--lib", lib, timeout=JOB_TIMEOUT)
    seen = res.lines("MISMATCH")
    kinds = ["size"] + ([] if lib == "numpy" else ["kind"])
    assert res.returncode == 0 and len(res.lines("OK after")) == 2, tail(res)
    assert len(res.lines("OK split")) == 2, tail(res)
    assert len(res.lines("OK stream refused")) == 2, tail(res)  # stream= on host memory
    for kind in kinds:
        lines = [ln for ln in seen if ln.split()[1] == kind]
        assert len(lines) == 2 and all(ln.split()[2] == "ValueError" for ln in lines), tail(res)
        assert any("rank 0:" in ln and "rank 1" in ln for ln in lines), tail(res)
        assert any("rank 1:" in ln and "rank 0" in ln for ln in lines), tail(res)
    if lib != "numpy":
        kind = " ".join(ln for ln in seen if ln.split()[1] == "kind")
        assert "GPU memory" in kind and "host memory" in kind, tail(res)


@pytest.mark.timeout(JOB_TIMEOUT + 60)
@pytest.mark.parametrize("lib", ["numpy", gpu_param("torch", id="torch")])
@pytest.mark.parametrize("when", ["now", "later"])
def test_a_dead_sender_is_an_error_not_a_hang(lib, when):
    """Rank 1 of 3 exits after a warm-up batch (at once, or while the others wait in recv):
    ranks 0 and 2, receiving from it, raise a forestcc error naming rank 1. Ranks run without
    forestcc-run, which would stop them at once."""
    procs = spawn_ranks("torchrun", 3, "gpu_p2p_check.py", "killed", "--lib", lib, "--when", when,
                        extra_env={"FORESTCC_TIMEOUT": "20"})
    results = collect(procs, timeout=JOB_TIMEOUT)
    report = "\n".join(f"rank {r}: exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
                       for r, res in enumerate(results))
    assert results[1].returncode == 1 and "EXITING" in results[1].stdout, report
    for r in (0, 2):
        raised = results[r].lines("RAISED")
        assert results[r].returncode == 0 and len(raised) == 1, report
        assert "rank 1" in raised[0], report


def test_a_build_without_cuda_refuses_gpu_memory_on_both_sides():
    """Without CUDA, an array that says it is GPU memory (__cuda_array_interface__) is refused
    by the sender and by the receiver, each before telling the other (no hang)."""
    if _C.built_with_cuda():
        pytest.skip("built with CUDA: the fake GPU array would reach CUDA")
    res = run_job(2, "gpu_p2p_check.py", "nocuda", "--lib", "numpy", timeout=JOB_TIMEOUT)
    refused = res.lines("REFUSED")
    assert res.returncode == 0 and len(refused) == 2, tail(res)
    assert all("ValueError" in ln and "without CUDA" in ln for ln in refused), tail(res)
