"""Helpers for multi-process tests: every job runs real processes, through forestcc-run or with
the environment another launcher (Open MPI, MPICH, Slurm, torchrun) would set."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"
# Generous: only there to turn a hang into a failure on a loaded 2-core machine.
JOB_TIMEOUT = 240
# Variables of any launcher, stripped so a test's job sees only the convention it emulates.
_LAUNCH_VARS = ("FORESTCC_RANK", "FORESTCC_SIZE", "FORESTCC_LOCAL_RANK", "FORESTCC_LOCAL_SIZE",
                "FORESTCC_ROOT_ADDR", "FORESTCC_JOB_ID", "FORESTCC_ROOT_FD", "OMPI_COMM_WORLD_RANK",
                "PMI_RANK", "SLURM_PROCID", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE")


@dataclass
class JobResult:
    returncode: int
    stdout: str
    stderr: str

    def lines(self, prefix: str) -> list[str]:
        """Output lines starting with `prefix`, without forestcc-run's "[rank] " label."""
        out = []
        for ln in self.stdout.splitlines():
            if ln.startswith("[") and "] " in ln:
                ln = ln.split("] ", 1)[1]
            if ln.startswith(prefix):
                out.append(ln)
        return out


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    env.setdefault("FORESTCC_TIMEOUT", "60")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_job(n: int, program: str, *args: str, env: dict | None = None,
            launcher_args: tuple[str, ...] = (), timeout: float = JOB_TIMEOUT) -> JobResult:
    """Run tests/programs/<program> on n ranks under forestcc-run."""
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", str(n), "--label", *launcher_args,
           sys.executable, str(PROGRAMS / program), *args]
    p = subprocess.run(cmd, env=clean_env(**(env or {})), capture_output=True, text=True,
                       timeout=timeout)
    return JobResult(p.returncode, p.stdout, p.stderr)


def free_port_pair() -> int:
    """A port p such that p and p + 1 were both free a moment ago (torchrun uses p; forestcc p+1)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair")


def convention_env(convention: str, rank: int, size: int, job: str, port: int) -> dict[str, str]:
    """The variables each launcher sets for one of its ranks."""
    if convention == "openmpi":
        return dict(OMPI_COMM_WORLD_RANK=rank, OMPI_COMM_WORLD_SIZE=size,
                    OMPI_COMM_WORLD_LOCAL_RANK=rank, OMPI_COMM_WORLD_LOCAL_SIZE=size,
                    PMIX_NAMESPACE=f"prterun-test-{job}@1", PMIX_RANK=rank)
    if convention == "mpich":
        return dict(PMI_RANK=rank, PMI_SIZE=size, MPI_LOCALRANKID=rank, MPI_LOCALNRANKS=size)
    if convention == "slurm":
        return dict(SLURM_PROCID=rank, SLURM_NTASKS=size, SLURM_LOCALID=rank, SLURM_NNODES=1,
                    SLURM_STEP_NUM_NODES=1, SLURM_JOB_ID=job, SLURM_STEP_ID=0,
                    SLURM_STEP_NODELIST="localhost")
    if convention == "torchrun":
        return dict(RANK=rank, WORLD_SIZE=size, LOCAL_RANK=rank, LOCAL_WORLD_SIZE=size,
                    MASTER_ADDR="127.0.0.1", MASTER_PORT=port, TORCHELASTIC_RUN_ID=job)
    raise ValueError(convention)


def spawn_ranks(convention: str, size: int, program: str, *args: str,
                extra_env: dict | None = None, ranks: list[int] | None = None
                ) -> list[subprocess.Popen]:
    """Start the ranks as children of this process with `convention`'s environment (as that
    launcher would set it). `ranks` starts only some of them (to test missing ranks)."""
    job = uuid.uuid4().hex[:12]
    port = free_port_pair()
    procs = []
    for rank in (ranks if ranks is not None else range(size)):
        env = clean_env(**convention_env(convention, rank, size, job, port), **(extra_env or {}))
        procs.append(subprocess.Popen([sys.executable, str(PROGRAMS / program), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def collect(procs: list[subprocess.Popen], timeout: float = JOB_TIMEOUT) -> list[JobResult]:
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
            stderr += "\n<killed by the test: hang>"
        out.append(JobResult(p.returncode, stdout, stderr))
    return out


def shm_segments() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("fcc-")}


@pytest.fixture
def no_new_shm():
    """Fails the test if it leaves forestcc shared-memory segments behind."""
    before = shm_segments()
    yield
    leaked = shm_segments() - before
    assert not leaked, f"shared-memory segments left behind: {sorted(leaked)}"
