"""forestcc as a torch.distributed backend (``import forestcc.torch``), against gloo in the same
job: every ProcessGroup operation on 1, 2 and 3 ranks, DDP and FSDP2 training, failures (a
mismatch between ranks, a dead rank, a timeout), the launchers (forestcc-run, torchrun, mpirun)
and the example. Every job imports torch on every rank (seconds each): checks are grouped into
few jobs."""
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (JOB_TIMEOUT, PROGRAMS, JobResult, clean_env, collect, run_job,
                      spawn_ranks)

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "examples" / "ddp_train.py"


def torchrun(n: int, script: Path, *args: str) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node n script args`` (its own free port)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
           "--tee=3", str(script), *args]
    return subprocess.run(cmd, env=clean_env(OMP_NUM_THREADS="1"), capture_output=True,
                          text=True, timeout=JOB_TIMEOUT)


def ok_ranks(stdout: str) -> int:
    """How many ranks printed "OK" (lines may carry a launcher's rank prefix)."""
    return sum(1 for ln in stdout.splitlines() if re.search(r"(^|[\s:\]])OK$", ln.rstrip()))


MPIRUN = shutil.which("mpirun")


@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_operation_matches_gloo(n, no_new_shm):
    """forestcc-run on 1 and 3 ranks; on 2, mpirun where there is one (the launcher's env://)."""
    if n == 2 and MPIRUN:
        env = clean_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
        cmd = [MPIRUN, "-n", "2", "--oversubscribe", sys.executable,
               str(PROGRAMS / "torch_ops.py")]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT)
        res = JobResult(p.returncode, p.stdout, p.stderr)
    else:
        res = run_job(n, "torch_ops.py", env={"OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert not res.lines("FAIL"), res.lines("FAIL")
    checked = res.lines("CHECKED")
    assert len(checked) == n and all(int(c.split()[1]) > 80 for c in checked), checked
    assert len(res.lines("OK")) == n


@pytest.mark.parametrize("n", [2, 3])
def test_ddp_and_fsdp2_match_gloo(n, no_new_shm):
    res = run_job(n, "torch_training.py", env={"OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert not res.lines("FAIL") and len(res.lines("OK")) == n, res.stdout[-2000:]


def test_mismatch_and_timeout_raise_on_every_rank(no_new_shm):
    res = run_job(2, "torch_failures.py", "mismatch")
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    for tag in ("ERROR", "ASYNC_ERROR"):
        lines = res.lines(tag + " ")
        assert len(lines) == 2, res.stdout
        for ln in lines:
            assert ln.startswith(f"{tag} DistBackendError forestcc ")
            assert "mismatch between ranks" in ln and "count=" in ln, ln
    (err,) = res.lines("TIMEOUT")
    assert "DistBackendError" in err and "timed out after 3 s" in err and "rank 1" in err, err
    (poisoned,) = res.lines("POISONED")
    assert "poisoned" in poisoned and "rank 0 reported" in poisoned, poisoned
    (monitored,) = res.lines("MONITORED")
    assert "rank 1 failed to pass monitored_barrier" in monitored, monitored


@pytest.mark.parametrize("n", [2, 3])
def test_a_call_the_backend_refused_on_one_rank_fails_on_every_rank(n, no_new_shm):
    # without the refusal in the call's place, rank 1's second all_gather met the others' first
    # and both returned (theirs with rank 1's second input)
    res = run_job(n, "torch_failures.py", "refused", env={"FORESTCC_TIMEOUT": "300"})
    out = res.stdout[-4000:] + res.stderr[-3000:]
    first = {int(ln.split()[1]): ln for ln in res.lines("FIRST")}
    second = {int(ln.split()[1]): ln for ln in res.lines("SECOND")}
    assert sorted(first) == sorted(second) == list(range(n)), out
    assert "output has" in first[1], out  # its own argument error
    for r in range(n):
        if r != 1:
            # found here, or as rank 1 reported it (its next call may find the mismatch first)
            assert "rank 1 refused its part of this call" in first[r] or "rank 1 reported" in first[r] \
                and "this rank refused its part of collective" in first[r], out
        assert "returned" not in second[r], out


@pytest.mark.parametrize("n", [2, 3])
def test_a_send_or_recv_the_backend_refused_fails_on_its_peer(n, no_new_shm):
    # without the refused messages in their places, rank 0's recv met rank 1's next send (and
    # returned it), and the pair went out of step
    res = run_job(n, "torch_failures.py", "refusedp2p", env={"FORESTCC_TIMEOUT": "300"})
    out = res.stdout[-4000:] + res.stderr[-3000:]
    lines = {(ln.split()[0], int(ln.split()[1])): ln for key in ("SEND", "RECV", "AFTER") for ln in res.lines(key)}
    assert "tag must be 0" in lines[("SEND", 1)] and "tag must be 0" in lines[("RECV", 1)], out
    assert "rank 1 refused its send" in lines[("SEND", 0)], out
    assert "rank 1 refused its recv" in lines[("RECV", 0)], out
    for r in range(n):
        assert lines[("AFTER", r)] == f"AFTER {r} ok", out


def test_dead_rank_becomes_an_error_not_a_hang():
    # Without a launcher (which would stop rank 0 at once), rank 0 must notice by itself.
    r0, r1 = collect(spawn_ranks("torchrun", 2, "torch_failures.py", "dead_rank"))
    assert r1.returncode == -9
    assert r0.returncode == 0, r0.stderr[-3000:]
    (err,) = [ln for ln in r0.stdout.splitlines() if ln.startswith("ERROR")]
    assert err.startswith("ERROR DistBackendError forestcc allreduce: RemoteError")
    assert "rank 1 (pid" in err and "died" in err


def test_example_under_torchrun():
    p = torchrun(2, EXAMPLE, "--backend", "forestcc", "--steps", "3")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert "backend forestcc: 2 ranks" in p.stdout and "step 3 loss" in p.stdout, p.stdout
    assert "done: median step" in p.stdout, p.stdout


def test_import_without_torch_fails_only_when_used():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import forestcc.torch as ft\n"
            "try:\n    ft.register()\nexcept ImportError as e:\n    print('IMPORTERROR', e)\n"
            "try:\n    ft.ProcessGroupForestcc\n"
            "except ImportError as e:\n    print('IMPORTERROR', e)\n")
    p = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("IMPORTERROR")]
    assert len(lines) == 2 and all("forestcc.torch needs PyTorch" in ln for ln in lines), p.stdout


PREMUL_SUM_CODE = """
import torch, torch.distributed as dist
from forestcc.torch import reductions
PREMUL = dist.ReduceOp.PREMUL_SUM

class Pickled:  # torch 2.11's ReduceOp: no .factor; the factor is in its pickle state
    op = PREMUL
    def __getstate__(self):
        return (PREMUL, 0.25)

class Hidden:  # a ReduceOp that shows the factor neither way
    op = PREMUL

print("REAL", reductions.resolve(dist._make_nccl_premul_sum(0.5), torch.float32, "allreduce").factor)
print("PICKLED", reductions.resolve(Pickled(), torch.float32, "allreduce").factor)
try:
    reductions.resolve(Hidden(), torch.float32, "allreduce")
except NotImplementedError as e:
    print("REFUSED", e)
print("SUPPORTED", reductions.PREMUL_SUM_SUPPORTED)
"""


def test_premul_sum_factor_from_every_torch():
    """The PREMUL_SUM factor read as ``op.factor`` (recent torch), from the op's pickle state
    (torch 2.11, which the GPU machine has), and refused naming the torch version where it is
    shown neither way."""
    p = subprocess.run([sys.executable, "-c", PREMUL_SUM_CODE], check=False, env=clean_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert "REAL 0.5" in out and "PICKLED 0.25" in out and "SUPPORTED True" in out, p.stdout
    refused = [ln for ln in out if ln.startswith("REFUSED ")]
    assert len(refused) == 1 and refused[0].startswith("REFUSED forestcc allreduce: "
                                                        "ReduceOp.PREMUL_SUM with torch "), out
    assert "is not supported by the forestcc backend" in refused[0], refused


def test_every_public_function_has_a_docstring():
    """Read from the sources (importing torch here would cost seconds): every module, every name
    in ``__all__`` and every public method of those classes has a docstring."""
    missing = []
    for path in sorted((ROOT / "python" / "forestcc" / "torch").glob("*.py")):
        tree = ast.parse(path.read_text())
        if not ast.get_docstring(tree):
            missing.append(path.name)
        public = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                    for t in node.targets):
                public = set(ast.literal_eval(node.value))
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name not in public:
                continue
            if not ast.get_docstring(node):
                missing.append(f"{path.name}: {node.name}")
            for member in node.body if isinstance(node, ast.ClassDef) else ():
                if isinstance(member, ast.FunctionDef) and not member.name.startswith("_") \
                        and not ast.get_docstring(member):
                    missing.append(f"{path.name}: {node.name}.{member.name}")
    assert not missing, missing
    for script in (EXAMPLE, ROOT / "perf" / "torch_bench.py"):
        tree = ast.parse(script.read_text())
        undocumented = [n.name for n in tree.body
                        if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
                        and not ast.get_docstring(n)]
        assert ast.get_docstring(tree) and not undocumented, (script, undocumented)
