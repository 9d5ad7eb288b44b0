"""Collectives on GPU memory (issue 15): CuPy arrays and PyTorch CUDA tensors on the caller's
stream, 2 to 4 processes sharing one GPU through CUDA IPC.

Tests marked ``gpu`` need a CUDA GPU: where none is visible they skip with the reason; where one
is, they run and fail loudly (also when forestcc was built without CUDA). The rank program is
tests/programs/gpu_check.py; its ``--lib numpy`` stand-in runs the same checks on host memory, so
the CI (no GPU) keeps the program itself working. On a GPU machine run tools/gpu-suite.sh.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import warnings

import pytest
from conftest import collect, run_job, spawn_ranks

from forestcc import _C


def _visible_gpus() -> int:
    """NVIDIA GPUs on this machine, by the driver's device files and nvidia-smi (not by forestcc,
    whose build is what the tests judge)."""
    if shutil.which("nvidia-smi"):
        try:
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                    timeout=60, check=False).stdout
            return sum(ln.startswith("GPU ") for ln in listed.splitlines())
        except (OSError, subprocess.SubprocessError):
            pass
    return sum(name.startswith("nvidia") and name[6:].isdigit() for name in os.listdir("/dev"))


def _why_skip() -> str | None:
    """Only missing hardware skips: with a GPU present the tests run, whatever the build."""
    if _visible_gpus() > 0:
        return None
    return ("no CUDA GPU visible (no /dev/nvidia<N>, nvidia-smi lists none): the GPU tests run on "
            "a GPU machine, see tools/gpu-suite.sh")


SKIP_REASON = _why_skip()
GPU = [pytest.mark.gpu, pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")]
# Generous: only there to turn a hang into a failure. Without CUDA MPS the ranks' kernels are
# time-sliced on the one GPU, so a spinning wait makes slow progress.
MATRIX_TIMEOUT = 300
JOB_TIMEOUT = 150
LARGE = str(1 << 20)  # elements: 4 MiB of float32 per block


def gpu_only(test):
    return pytest.mark.gpu(pytest.mark.skipif(SKIP_REASON is not None,
                                              reason=SKIP_REASON or "")(test))


def gpu_param(*values, id):
    return pytest.param(*values, marks=GPU, id=id)


def tail(res, chars=4000) -> str:
    fails = "\n".join(res.lines("FAIL")[:30])
    return (f"exit {res.returncode}\n--- FAIL lines\n{fails}\n--- stdout\n{res.stdout[-chars:]}"
            f"\n--- stderr\n{res.stderr[-chars:]}")


def check_matrix(res, n: int) -> None:
    checked = res.lines("CHECKED")
    assert res.returncode == 0 and len(checked) == n, tail(res)
    for line in checked:  # CHECKED <n> FAILURES <f> UNSUPPORTED <u>
        words = line.split()
        assert int(words[1]) > 0 and words[3] == "0", tail(res)
    refused = sorted({ln.split(" ", 1)[1] for ln in res.lines("UNSUPPORTED")})
    if refused:
        warnings.warn("algorithms that refused GPU memory (auto served every call):\n  "
                      + "\n  ".join(refused))


# -- runs everywhere (CI) ----------------------------------------------------------------------

def test_built_with_cuda_when_nvcc_is_present():
    """The CUDA sources are compiled wherever nvcc is (FORESTCC_CUDA=AUTO), so they cannot rot."""
    if os.environ.get("FORESTCC_CUDA", "").upper() == "OFF":
        pytest.skip("FORESTCC_CUDA=OFF: built without CUDA on purpose")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH: a build without CUDA is expected")
    assert _C.built_with_cuda(), (f"nvcc is at {nvcc}, but forestcc._C was built without CUDA "
                                  f"(rebuild: tools/dev-install.sh)")


def test_gpu_program_on_host_memory(no_new_shm):
    """gpu_check.py's checks (references, in-place views, every algorithm) on host memory."""
    res = run_job(3, "gpu_check.py", "matrix", "--lib", "numpy", "--algos", "all",
                  "--algo-dtypes", "float32,bfloat16", "--large", "4099")
    check_matrix(res, 3)
    res = run_job(2, "gpu_check.py", "features", "--lib", "numpy")
    assert res.returncode == 0 and len(res.lines("OK basic")) == 2, tail(res)


def _collected(env_first: str | None) -> list[str]:
    env = dict(os.environ)
    env.pop("FORESTCC_TESTS_FIRST", None)
    if env_first is not None:
        env["FORESTCC_TESTS_FIRST"] = env_first
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          *sorted(glob.glob(os.path.join(here, "test_gpu*.py")))],
                         capture_output=True, text=True, timeout=240, cwd=os.path.dirname(here), env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return [ln for ln in out.stdout.splitlines() if "::" in ln]


def test_gpu_suite_runs_the_first_tests_first():
    """tools/gpu-suite.sh runs the tests of never-run GPU code first (FORESTCC_TESTS_FIRST), so
    the GPU machine's time box cuts what matters least; each piece of its default list must
    still name a test (a renamed test would quietly lose its place)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "gpu-suite.sh")
    lines = [ln for ln in open(script).read().splitlines() if ln.startswith("FIRST_DEFAULT")]
    default = subprocess.run(["bash", "-c", "\n".join(lines) + '\necho "$FIRST_DEFAULT"'],
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    pieces = default.split(",")
    assert len(pieces) >= 3, default
    plain = _collected(None)
    ordered = _collected(default)
    assert sorted(plain) == sorted(ordered), "reordering lost or added tests"
    for piece in pieces:
        assert any(piece in t for t in plain), f"GPU_SUITE_FIRST's '{piece}' names no test"
    # Each piece's tests in the piece's order, then the rest in collection order.
    rank = [next((i for i, p in enumerate(pieces) if p in t), len(pieces)) for t in ordered]
    assert rank == sorted(rank), ordered[:20]
    rest = [t for t in ordered if rank[ordered.index(t)] == len(pieces)]
    assert rest == [t for t in plain if t in rest]
    assert ordered != plain  # the default moves something (else the check above proves nothing)


# -- GPU ---------------------------------------------------------------------------------------

@gpu_only
def test_forestcc_sees_the_gpu():
    import forestcc.cuda
    assert _C.built_with_cuda(), "a GPU is visible but forestcc._C was built without CUDA"
    assert forestcc.cuda.is_available(), (f"a GPU is visible but forestcc.cuda.is_available() "
                                          f"is False (_C.cuda_device_count() = "
                                          f"{_C.cuda_device_count()})")


_feature_jobs: dict = {}


def features_job(n: int, lib: str):
    """One run of gpu_check.py features per (n, lib), shared by the feature tests."""
    key = (n, lib)
    if key not in _feature_jobs:
        try:
            _feature_jobs[key] = run_job(n, "gpu_check.py", "features", "--lib", lib,
                                         timeout=JOB_TIMEOUT * 2)
        except subprocess.TimeoutExpired as e:
            _feature_jobs[key] = e
    res = _feature_jobs[key]
    if isinstance(res, Exception):
        pytest.fail(f"the features job ({n} ranks, {lib}) hung: {res}")
    return res


FEATURE_JOBS = [gpu_param(2, "torch", id="torch-2"), gpu_param(3, "torch", id="torch-3"),
                gpu_param(2, "cupy", id="cupy-2")]


@pytest.mark.timeout(JOB_TIMEOUT * 2 + 60)
@pytest.mark.parametrize("n,lib", FEATURE_JOBS)
@pytest.mark.parametrize("feature", ["basic", "stream_kinds", "async", "two_comms", "barrier"])
def test_feature(feature, n, lib):
    """basic: one all_reduce. stream_kinds: the stream given as the current one, as a framework
    stream object and as an int, between kernels on it. async: handles waited in reverse order.
    two_comms: the world, a duplicate and an even/odd split, each on its own stream, calls
    interleaved. barrier."""
    res = features_job(n, lib)
    ok = [ln for ln in res.lines("OK ") if ln.split()[1] == feature]
    assert len(ok) == n, tail(res)


@pytest.mark.timeout(JOB_TIMEOUT + 60)
@pytest.mark.parametrize("n", [gpu_param(3, id="3")])
def test_jax_gpu_arrays(n, no_new_shm):
    """JAX arrays on the GPU as inputs (immutable; bfloat16 and fp8 through DLPack, each JAX
    allocation opened by peers through CUDA IPC) of every collective that reads them, the results
    in PyTorch CUDA tensors, against numpy; calls that would write into a JAX array refused. The
    same program runs on CPU in tests/test_framework_arrays.py."""
    res = run_job(n, "jax_arrays.py", "--gpu", timeout=JOB_TIMEOUT)
    assert res.returncode == 0 and len(res.lines("OK")) == n, tail(res)


@pytest.mark.timeout(JOB_TIMEOUT * 2 + 60)
@pytest.mark.parametrize("n", [gpu_param(2, id="2"), gpu_param(3, id="3")])
def test_cuda_graph_capture_and_replay(n):
    """torch.cuda.graph captures an out-of-place and an in-place all_reduce (warmed up before
    the capture); six replays with new inputs, an auto and an eager call (GPU scratch banks)
    between two of them; then an eager all_reduce captured and replayed five times (the bank is
    counted on the GPU, so replays alternate banks), with uncaptured eager calls between."""
    res = features_job(n, "torch")
    ok = [ln for ln in res.lines("OK ") if ln.split()[1] == "graph"]
    assert len(ok) == n, tail(res)


@gpu_only
@pytest.mark.timeout(JOB_TIMEOUT * 2 + 60)
def test_send_recv_on_gpu_is_served_or_refused_loudly():
    """GPU send/recv either delivers the data or raises an error that says GPU."""
    res = features_job(2, "torch")
    ok = [ln for ln in res.lines("OK ") if ln.split()[1] == "sendrecv"]
    assert len(ok) == 2, tail(res)
    refused = [ln for ln in ok if "refused" in ln]
    if refused:
        warnings.warn(f"GPU send/recv refused: {refused[0]}")


@pytest.mark.timeout(JOB_TIMEOUT + 60)
@pytest.mark.parametrize("lib", ["numpy", gpu_param("torch", id="torch")])
@pytest.mark.parametrize("when", ["now", "later"])
def test_killed_rank_is_an_error_on_the_others(lib, when):
    """Rank 1 of 3 exits instead of calling (at once, or after the others' kernels started
    waiting): ranks 0 and 2 get a forestcc error naming rank 1 within FORESTCC_TIMEOUT, and
    nothing hangs. Ranks run without forestcc-run, which would stop them at once."""
    procs = spawn_ranks("torchrun", 3, "gpu_check.py", "killed", "--lib", lib, "--victim", "1",
                        "--when", when, extra_env={"FORESTCC_TIMEOUT": "20"})
    results = collect(procs, timeout=JOB_TIMEOUT)
    report = "\n".join(f"rank {r}: exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
                       for r, res in enumerate(results))
    assert results[1].returncode == 1 and "EXITING" in results[1].stdout, report
    for r in (0, 2):
        raised = results[r].lines("RAISED")
        assert results[r].returncode == 0 and len(raised) == 1, report
        assert "rank 1" in raised[0], report


@pytest.mark.timeout(JOB_TIMEOUT + 60)
@pytest.mark.parametrize("n", [gpu_param(2, id="2"), gpu_param(3, id="3")])
def test_mismatched_count_raises_on_every_rank(n, no_new_shm):
    """Rank 0 passes one element more: every rank raises (MismatchError where it saw the other
    call, AbortedError carrying that report where a peer saw it first), none returns."""
    res = run_job(n, "gpu_check.py", "mismatch", "--lib", "torch", timeout=JOB_TIMEOUT)
    seen = res.lines("MISMATCH")
    assert res.returncode == 0 and len(seen) == n, tail(res)
    assert any(ln.split()[1] == "MismatchError" for ln in seen), tail(res)


MATRIX = [
    gpu_param(2, "torch", "--algos", "all", "--algo-dtypes", "float32,bfloat16",
              "--large", LARGE, "--large-dtypes", "float32,bfloat16", id="torch-2-all-algos"),
    gpu_param(3, "torch", "--algos", "all", "--algo-dtypes", "float32,bfloat16",
              "--large", LARGE, "--large-dtypes", "float32,bfloat16", id="torch-3-all-algos"),
    gpu_param(4, "torch", "--algos", "all", "--algo-dtypes", "float32,bfloat16",
              "--large", LARGE, "--large-dtypes", "float32,bfloat16", id="torch-4-all-algos"),
    gpu_param(2, "cupy", "--algos", "all", "--algo-dtypes", "float32",
              "--large", LARGE, id="cupy-2-all-algos"),
    gpu_param(3, "cupy", "--memory", "framework", "--large", LARGE, id="cupy-3-framework-memory"),
    gpu_param(4, "torch", "--memory", "framework", "--dtypes", "float32,bfloat16,float16,int64",
              id="torch-4-framework-memory"),
]


@pytest.mark.timeout(MATRIX_TIMEOUT + 60)
@pytest.mark.parametrize("n,lib,options", [pytest.param(p.values[0], p.values[1], p.values[2:],
                                                        marks=p.marks, id=p.id) for p in MATRIX])
def test_every_collective_dtype_op_and_layout(n, lib, options, no_new_shm):
    """Every collective x dtype (all but fp8) x op x in place / out of place x counts 0, 1, 1001
    (and 2**20 elements for some dtypes), algo="auto" and, for some dtypes, every built-in
    algorithm of the collective; memory from forestcc.cuda.empty or from the framework."""
    res = run_job(n, "gpu_check.py", "matrix", "--lib", lib, *options, timeout=MATRIX_TIMEOUT)
    check_matrix(res, n)


@pytest.mark.timeout(MATRIX_TIMEOUT + 60)
@pytest.mark.parametrize("packets", [gpu_param("on", id="packets"), gpu_param("off", id="signals")])
def test_eager_plans_on_gpu(packets, no_new_shm):
    """algo="eager" (the GPU scratch banks) for every collective it serves, dtype, op and layout
    on 3 ranks, its data as packets (rank 0 FORESTCC_PACKETS=on, the others auto: on GPU memory
    both mean packets, so their stamps agree) or as puts and signals (off); no call refused."""
    res = run_job(3, "gpu_check.py", "matrix", "--lib", "torch", "--algos", "eager",
                  "--packets-by-rank", "on,auto" if packets == "on" else packets, timeout=MATRIX_TIMEOUT)
    check_matrix(res, 3)
    assert not res.lines("UNSUPPORTED"), tail(res)


@pytest.mark.timeout(MATRIX_TIMEOUT + 60)
@pytest.mark.parametrize("n,options", [gpu_param(2, (), id="2"),
                                       gpu_param(4, ("--algos", "all"), id="4-all-algos")])
def test_fp8(n, options, no_new_shm):
    """float8_e4m3fn and float8_e5m2 (torch), apart so that their failure hides nothing else."""
    res = run_job(n, "gpu_check.py", "matrix", "--lib", "torch",
                  "--dtypes", "float8_e4m3fn,float8_e5m2", *options, timeout=MATRIX_TIMEOUT)
    check_matrix(res, n)
