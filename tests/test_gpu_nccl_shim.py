"""The NCCL shim on GPU memory (docs/nccl-shim.md, "GPU memory"), 2 to 4 processes on one GPU.

Programs written against NCCL, run unmodified under ``LD_PRELOAD=$(forestcc-config --nccl-shim)``
through forestcc-run, every rank on CUDA device 0 (the real NCCL refuses two ranks on one GPU):

- tests/nccl/device_check.c, linked against the nvidia-nccl wheel's libnccl.so.2 (the shim
  interposes): every collective on GPU buffers against a reference, groups, PreMulSum with a
  device scalar, ncclMemAlloc, abort, asynchronous GPU errors, send/recv;
- tests/programs/gpu_shim_torch.py: PyTorch's ProcessGroupNCCL (backend "nccl") against numpy and,
  for a DDP step, against gloo.

Tests marked ``gpu`` skip with the reason where no GPU is visible (tests/test_gpu.py decides); the
first test runs everywhere: device_check.c against a stand-in driver whose "GPU memory" is host
memory, so CI keeps the program and its references working.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import JOB_TIMEOUT, PROGRAMS, clean_env
from test_gpu import gpu_only
from test_nccl_shim import HERE, SHIM, STUBS, WHEEL_HEADER_DIR, WHEEL_LIBRARY, _compile


@pytest.fixture(scope="module")
def device_check(tmp_path_factory):
    """device_check.c linked against the real NCCL (the shim comes in by LD_PRELOAD), and the
    stand-in driver for the CI run."""
    out = tmp_path_factory.mktemp("nccl-device")
    _compile("-O1", "-Wall", "-Wextra", "-I", str(STUBS), "-I", str(WHEEL_HEADER_DIR),
             str(HERE / "device_check.c"), "-o", str(out / "device_check"),
             f"-L{WHEEL_LIBRARY.parent}", "-l:libnccl.so.2", f"-Wl,-rpath,{WHEEL_LIBRARY.parent}",
             "-lpthread", "-ldl")
    host_driver = out / "host-driver"
    host_driver.mkdir()
    _compile("-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", str(HERE / "host_libcuda.c"), "-o",
             str(host_driver / "libcuda.so.1"))
    return out


def run_device_check(folder, tmp_path, n: int, mode: str, *args: str, timeout: float = JOB_TIMEOUT,
                     **env: str):
    rendezvous = tmp_path / f"{mode}-{n}"
    rendezvous.mkdir()
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", str(n), "--label",
           str(folder / "device_check"), mode, str(rendezvous), *args]
    return subprocess.run(cmd, env=clean_env(LD_PRELOAD=str(SHIM), **env), capture_output=True,
                          text=True, timeout=timeout)


def assert_ok(p, mode: str, n: int) -> None:
    ok = sorted(line.split("] ", 1)[1] for line in p.stdout.splitlines() if "] OK " in line)
    assert p.returncode == 0 and ok == sorted(f"OK {mode} {r}" for r in range(n)), \
        p.stdout[-5000:] + p.stderr[-5000:]


def test_device_program_on_a_stand_in_driver(device_check, tmp_path, no_new_shm):
    """Runs everywhere: the program's calls and references, its "GPU memory" being host memory."""
    p = run_device_check(device_check, tmp_path, 3, "collectives", "host-driver",
                         LD_LIBRARY_PATH=str(device_check / "host-driver"))
    assert_ok(p, "collectives", 3)


@pytest.mark.parametrize("n", [1, 3])
def test_non_blocking_program_on_a_stand_in_driver(device_check, tmp_path, n, no_new_shm):
    """Runs everywhere: device_check nonblocking's calls and references on host "GPU memory"."""
    p = run_device_check(device_check, tmp_path, n, "nonblocking",
                         LD_LIBRARY_PATH=str(device_check / "host-driver"))
    assert_ok(p, "nonblocking", n)


def test_realloc_program_on_a_stand_in_driver(device_check, tmp_path, no_new_shm):
    """Runs everywhere: device_check p2p-realloc's calls and references on host "GPU memory"."""
    p = run_device_check(device_check, tmp_path, 3, "p2p-realloc",
                         LD_LIBRARY_PATH=str(device_check / "host-driver"))
    assert_ok(p, "p2p-realloc", 3)


PERF_PROGRAMS = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "alltoall_sendrecv", "broadcast",
                 "sendrecv"]


def run_perf(tmp_path, n: int, name: str, **env: str):
    folder = subprocess.run(["forestcc-config", "--nccl-perf"], capture_output=True, text=True,
                            timeout=60, check=True).stdout.strip()
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", str(n), f"{folder}/{name}_perf", "-M", "gpu",
           "-b", "8", "-e", "1M", "-f", "32", "-n", "3", "-w", "1"]
    return subprocess.run(cmd, env=clean_env(NCCL_PERF_ID_FILE=str(tmp_path / "id"), **env),
                          capture_output=True, text=True, timeout=JOB_TIMEOUT)


def assert_perf_table(p) -> None:
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]  # exit 1: some #wrong
    assert "ranks on GPU memory (rank 0 on CUDA device 0)" in p.stdout, p.stdout[-3000:]
    rows = [ln for ln in p.stdout.splitlines() if ln and not ln.startswith("#")]
    assert len(rows) == 4, p.stdout[-3000:]  # 8 B, 256 B, 8 KiB, 256 KiB


def test_perf_gpu_mode_on_a_stand_in_driver(device_check, tmp_path, no_new_shm):
    """Runs everywhere: perf/nccl's -M gpu code (buffers, stream, copies) on the stand-in driver."""
    assert_perf_table(run_perf(tmp_path, 2, "all_reduce",
                               LD_LIBRARY_PATH=str(device_check / "host-driver")))


@gpu_only
@pytest.mark.parametrize("name", PERF_PROGRAMS)
def test_perf_programs_on_gpu_memory(tmp_path, name):
    # perf/nccl linked against the shim (forestcc-config --nccl-perf), 2 ranks on the one GPU
    assert_perf_table(run_perf(tmp_path, 2, name))


@gpu_only
@pytest.mark.parametrize("n", [2, 3])
def test_non_blocking_calls_on_gpu_memory(device_check, tmp_path, n):
    # the calls run on kept call threads: each must still run on the buffers' device
    assert_ok(run_device_check(device_check, tmp_path, n, "nonblocking"), "nonblocking", n)


@gpu_only
@pytest.mark.parametrize("n", [2, 3, 4])
def test_every_collective_on_gpu_memory(device_check, tmp_path, n):
    assert_ok(run_device_check(device_check, tmp_path, n, "collectives"), "collectives", n)


@gpu_only
@pytest.mark.parametrize("n", [2, 3])
def test_send_recv_groups_on_gpu_memory(device_check, tmp_path, n):
    # needs Collectives::sendRecv on GPU memory (branch gpu-p2p); before it the shim refuses
    # with "send/recv of GPU memory: this forestcc build's point-to-point batch ..."
    assert_ok(run_device_check(device_check, tmp_path, n, "p2p"), "p2p", n)


@gpu_only
@pytest.mark.parametrize("n", [2, 3])
def test_send_recv_on_buffers_freed_and_allocated_again(device_check, tmp_path, n):
    # a peer's new allocation at a freed one's addresses: its stale import here must not be used
    # (perf/nccl's programs allocated per size once; "cudaMemcpyAsync: invalid argument")
    assert_ok(run_device_check(device_check, tmp_path, n, "p2p-realloc"), "p2p-realloc", n)


@gpu_only
def test_abort_ends_a_call_waiting_for_its_peers(device_check, tmp_path):
    p = run_device_check(device_check, tmp_path, 3, "abort")
    assert_ok(p, "abort", 3)
    assert "ncclCommAbort" in p.stdout, p.stdout[-3000:]


@gpu_only
@pytest.mark.parametrize("n", [2, 3])
def test_async_error_shows_a_failure_on_the_gpu(device_check, tmp_path, n):
    # rank 1's kernel is held back, so the others' kernels time out (FORESTCC_TIMEOUT) after their
    # calls returned: ncclCommGetAsyncError, polled, must turn from ncclSuccess to that error
    # A few 5 s GPU timeouts in all: a hang shows in 90 s, not JOB_TIMEOUT (GPU time is scarce)
    p = run_device_check(device_check, tmp_path, n, "async-error", timeout=90, FORESTCC_TIMEOUT="5")
    assert_ok(p, "async-error", n)
    line = next((ln for ln in p.stdout.splitlines() if "ASYNC-ERROR" in ln), "")
    assert "a call on GPU memory failed" in line, p.stdout[-3000:]


# ---- PyTorch ---------------------------------------------------------------------------------------

def _torch_cuda_library():
    import torch
    from pathlib import Path
    return Path(torch.__file__).parent / "lib" / "libtorch_cuda.so"


@gpu_only
def test_the_shim_exports_every_nccl_symbol_torch_imports():
    library = _torch_cuda_library()
    if not library.exists():
        pytest.fail(f"{library} is missing: a CUDA build of PyTorch is needed on the GPU machine")
    imported = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True,
                              text=True, timeout=120, check=True).stdout
    wanted = {ln.split()[-1].split("@")[0] for ln in imported.splitlines() if " nccl" in ln}
    exported = subprocess.run(["nm", "-D", "--defined-only", str(SHIM)], capture_output=True,
                              text=True, timeout=120, check=True).stdout
    have = {ln.split()[-1].split("@")[0] for ln in exported.splitlines()}
    assert wanted, f"{library} imports no nccl* symbol: is NCCL linked statically into it?"
    assert wanted <= have, f"torch imports nccl symbols the shim lacks: {sorted(wanted - have)}"


def run_torch(tmp_path, n: int, section: str, *args: str):
    rendezvous = tmp_path / f"torch-{section}-{n}"
    rendezvous.mkdir()
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", str(n), "--label", sys.executable,
           str(PROGRAMS / "gpu_shim_torch.py"), section, str(rendezvous), *args]
    env = clean_env(LD_PRELOAD=str(SHIM), FORESTCC_EXPECT_SHIM=str(SHIM))
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT * 2)


@pytest.mark.timeout(JOB_TIMEOUT * 2 + 60)
@pytest.mark.parametrize("section", ["collectives", "a2a_splits", "ddp"])
def test_torch_program_on_gloo_stand_in(tmp_path, section, no_new_shm):
    """Runs everywhere: gpu_shim_torch.py's checks and references with gloo on CPU tensors."""
    pytest.importorskip("torch")
    assert_ok(run_torch(tmp_path, 2, section, "--stand-in"), section, 2)


# the_shim_is_loaded() of gpu_shim_torch.py in one process, the wheel's libnccl.so.2 loaded as
# libtorch_cuda.so loads it; prints the failure count
_INTERPOSITION = """
import ctypes, runpy, sys
sys.argv = ["gpu_shim_torch.py", "collectives", "unused"]
order = {order!r}
for path in order:
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
program = runpy.run_path({program!r}, run_name="not_main")
check = program["the_shim_is_loaded"]
check()
print("FAILURES", check.__globals__["failures"])  # run_path returns a copy of the globals
"""


@pytest.mark.parametrize("preload", [True, False], ids=["preloaded", "loaded-after-the-wheel"])
def test_torch_program_checks_interposition(preload):
    """Runs everywhere: gpu_shim_torch.py's check passes when LD_PRELOAD puts the shim first in the
    global scope although the wheel's libnccl.so.2 is mapped too, and fails when the shim is merely
    loaded after the wheel (mapped, but torch's NCCL calls would bind to the wheel's library)."""
    pytest.importorskip("torch")
    if not WHEEL_LIBRARY.exists():
        pytest.skip(f"the nvidia-nccl wheel's {WHEEL_LIBRARY} is not installed")
    order = [str(WHEEL_LIBRARY)] if preload else [str(WHEEL_LIBRARY), str(SHIM)]
    env = clean_env(FORESTCC_EXPECT_SHIM=str(SHIM), FORESTCC_RANK="0", FORESTCC_SIZE="1",
                    **({"LD_PRELOAD": str(SHIM)} if preload else {}))
    code = _INTERPOSITION.format(order=order, program=str(PROGRAMS / "gpu_shim_torch.py"))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    if preload:
        assert "FAILURES 0" in p.stdout and "FAIL rank" not in p.stdout, p.stdout[-3000:]
    else:
        assert "FAILURES 0" not in p.stdout and "ncclGetVersion in the global scope is at" in p.stdout, p.stdout[-3000:]
        assert "the shim does not interpose" in p.stdout, p.stdout[-3000:]


@gpu_only
@pytest.mark.timeout(JOB_TIMEOUT * 2 + 60)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_torch_collectives_on_the_shim(tmp_path, n):
    assert_ok(run_torch(tmp_path, n, "collectives"), "collectives", n)


@gpu_only
@pytest.mark.timeout(JOB_TIMEOUT * 2 + 60)
@pytest.mark.parametrize("n", [2, 3])
def test_torch_all_to_all_with_splits_on_the_shim(tmp_path, n):
    # torch issues it as ncclSend/ncclRecv in one group: needs branch gpu-p2p (see above)
    assert_ok(run_torch(tmp_path, n, "a2a_splits"), "a2a_splits", n)


@gpu_only
@pytest.mark.timeout(JOB_TIMEOUT * 2 + 60)
@pytest.mark.parametrize("n", [2, 3])
def test_torch_ddp_step_matches_gloo(tmp_path, n):
    assert_ok(run_torch(tmp_path, n, "ddp"), "ddp", n)
