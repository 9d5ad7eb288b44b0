"""Helpers for multi-process tests: every job runs real processes, through forestcc-run or with
the environment another launcher (Open MPI, MPICH, Slurm, torchrun) would set."""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.internal.conjecture import engine as _hypothesis_engine

PROGRAMS = Path(__file__).parent / "programs"

# The suite's own namespace. Every run names its shared memory /dev/shm/<SHM_PREFIX>-<pid>-...
# (forestcc reads FORESTCC_SHM_PREFIX, default "fcc"), set here at import, before any test or
# child starts, so every process the suite starts inherits it. The leak checks then judge only
# this run's segments and processes, and another forestcc job on the machine (default prefix,
# or another run of this suite) neither fails them nor is swept by them: forestcc sweeps only
# names that start with its own prefix and a pid, and "fcct<hex>-" is never "fcc-<pid>-".
SHM_PREFIX = f"fcct{uuid.uuid4().hex[:8]}"
os.environ["FORESTCC_SHM_PREFIX"] = SHM_PREFIX
# Proofs of plan files (forestcc.plan.proof) are recorded under $XDG_CACHE_HOME: the suite keeps
# its own, so it neither writes into the user's cache nor trusts a record from an earlier run.
_CACHE = tempfile.mkdtemp(prefix=f"{SHM_PREFIX}-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

# Hypothesis: no per-example deadline (a loaded 2-core machine is slow at random), no explain
# phase (it reruns a failing test many more times), one bug reported per test, and shrinking
# bounded: each failing test gets at most SHRINK_SECONDS of shrinking and the whole run at most
# SHRINK_BUDGET_SECONDS (counted as the time of failing hypothesis tests), after which failures
# are reported as found. Without this, shrinking may take five minutes per failing test, and a
# broken shared dependency fails all of them. Tests' own @settings inherit what they do not set.
SHRINK_SECONDS = 60
SHRINK_BUDGET_SECONDS = 240
settings.register_profile(
    "forestcc", deadline=None, max_examples=100, report_multiple_bugs=False, print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("forestcc")
# Hypothesis has no setting for the shrink time; this module constant is its documented knob
# ("monkeypatchable"). Fail loudly if a release renames it, rather than shrink unbounded.
if not hasattr(_hypothesis_engine, "MAX_SHRINKING_SECONDS"):
    raise RuntimeError("hypothesis.internal.conjecture.engine.MAX_SHRINKING_SECONDS is gone: "
                       "bound shrinking another way in tests/conftest.py")
_shrink_spent = 0.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    global _shrink_spent
    cap = min(SHRINK_SECONDS, max(0.0, SHRINK_BUDGET_SECONDS - _shrink_spent))
    _hypothesis_engine.MAX_SHRINKING_SECONDS = cap
    start = time.monotonic()
    outcome = yield
    if outcome.excinfo is not None and getattr(getattr(item, "obj", None), "is_hypothesis_test",
                                                 False):
        _shrink_spent += time.monotonic() - start
        item.add_report_section("call", "shrinking", f"tests/conftest.py capped shrinking at "
                                f"{cap:.0f} s (a warning of 'five minutes' quotes hypothesis's "
                                f"default)")


def first_tests(items, patterns: str):
    """`items` with those whose node id contains one of the comma-separated `patterns` first, in
    the patterns' order, the rest after them as collected. A run cut short by a time box (the GPU
    machine's few minutes: tools/gpu-suite.sh, GPU_SUITE_FIRST) then has run what matters most."""
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]

    def rank(item) -> int:
        return next((i for i, p in enumerate(wanted) if p in item.nodeid), len(wanted))

    return sorted(items, key=rank)  # stable: collection order within each rank


def pytest_collection_modifyitems(config, items):
    patterns = os.environ.get("FORESTCC_TESTS_FIRST", "")
    if patterns:
        items[:] = first_tests(items, patterns)


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


# Sockets that keep free_port_pair()'s ports taken until the test ends.
_held_ports: list[socket.socket] = []


def free_port_pair() -> int:
    """A port p such that p and p + 1 stay reserved for this test (torchrun's store uses p;
    forestcc's rank 0 listens on p + 1).

    Both are bound (on every address, not listening) until the test ends, so no other job can
    take them between this call and the ranks' bind, a window that was long enough on a loaded
    machine to time out a torchrun test. They are bound without SO_REUSEADDR (so the bind fails
    if anyone else holds them) and SO_REUSEADDR is set afterwards: Linux then lets a socket that
    also sets SO_REUSEADDR bind and listen there while none is listening (forestcc's listener
    and torch's TCPStore set it), refuses every bind without it, and hands out a bound port as
    an ephemeral one only when no other is left. Another run of this suite probes p + 1 without
    SO_REUSEADDR too, so two runs never share a pair."""
    for _ in range(100):
        first, second = socket.socket(), socket.socket()
        try:
            first.bind(("", 0))
            second.bind(("", first.getsockname()[1] + 1))
        except (OSError, OverflowError):  # p + 1 taken, or p was the last port
            first.close()
            second.close()
            continue
        for s in (first, second):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _held_ports.extend((first, second))
        return first.getsockname()[1]
    raise RuntimeError("no free port pair")


@pytest.fixture(autouse=True)
def _release_held_ports():
    yield
    while _held_ports:
        _held_ports.pop().close()


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


def shm_segments(prefix: str = SHM_PREFIX) -> set[str]:
    """This run's shared-memory segments (those of other jobs on the machine are not ours)."""
    return {n for n in os.listdir("/dev/shm") if n.startswith(prefix + "-")}


@contextlib.contextmanager
def assert_no_new_shm():
    """Fails if the block leaves shared-memory segments of this run behind."""
    before = shm_segments()
    yield
    leaked = shm_segments() - before
    assert not leaked, f"shared-memory segments left behind: {sorted(leaked)}"


@pytest.fixture
def no_new_shm():
    """Fails the test if it leaves forestcc shared-memory segments of this run behind."""
    with assert_no_new_shm():
        yield


def suite_processes() -> list[int]:
    """Running processes (zombies aside) that this run started, at any depth, orphans included:
    those whose environment carries this run's FORESTCC_SHM_PREFIX. Other jobs' are not listed."""
    mine = f"FORESTCC_SHM_PREFIX={SHM_PREFIX}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone, or another user's
            continue
        if mine in env and state not in ("Z", "X"):
            found.append(int(pid))
    return found


# --- Emulated hosts (forestcc.cluster) ---------------------------------------------------------
# Tests across machines run on hosts made of namespaces on this machine. A cluster is made once
# per module and host count (cluster_of) or per test when it needs its own shaping (make_cluster).
# When namespaces cannot be made (not root, no iproute2), the test fails with the reason: these
# tests never skip.

def _make_cluster(hosts: int, **options):
    from forestcc.cluster import Cluster, ClusterError
    try:
        return Cluster.create(hosts, **options)
    except ClusterError as exc:
        pytest.fail(f"cannot make an emulated cluster of {hosts} hosts: {exc}")


@pytest.fixture(scope="module")
def cluster_of():
    """cluster_of(hosts) -> a forestcc.cluster.Cluster with that many hosts (h0, h1, ...), shared
    by the module's tests and taken down at its end. Each call brings back any link a previous
    test cut; what a test starts in the hosts it must stop itself."""
    made: dict[int, object] = {}

    def get(hosts: int = 2):
        if hosts not in made:
            made[hosts] = _make_cluster(hosts)
        c = made[hosts]
        for h in c.hosts:
            if not c.link_is_up(h):
                c.restore(h)
        return c

    yield get
    for c in made.values():
        c.destroy()


@pytest.fixture
def make_cluster():
    """make_cluster(hosts, shaping=forestcc.cluster.Shaping("1gbit"), ...) -> a cluster of the
    test's own (for shaping or anything it must not share), taken down when the test ends."""
    made = []

    def make(hosts: int = 2, **options):
        made.append(_make_cluster(hosts, **options))
        return made[-1]

    yield make
    for c in made:
        c.destroy()


def run_cluster_job(cluster, ranks_per_host: int, program: str, *args: str,
                    env: dict | None = None, launcher_args: tuple[str, ...] = (),
                    timeout: float = JOB_TIMEOUT) -> JobResult:
    """Run tests/programs/<program> with `ranks_per_host` ranks on every host of `cluster`,
    under forestcc-run --label (rank 0 on h0, ranks filled host by host)."""
    cmd = cluster.launcher_argv(ranks_per_host, [sys.executable, str(PROGRAMS / program), *args],
                                ("--label", *launcher_args))
    p = subprocess.run(cmd, env=clean_env(**(env or {})), capture_output=True, text=True,
                       timeout=timeout)
    return JobResult(p.returncode, p.stdout, p.stderr)


def host_shm_segments(cluster, prefix: str = SHM_PREFIX) -> dict[str, set[str]]:
    """This run's shared-memory segments in each host's own /dev/shm, by host name."""
    return {h.name: {n for n in cluster.shm(h) if n.startswith(prefix + "-")}
            for h in cluster.hosts}
