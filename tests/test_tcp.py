"""The tcp transport on one machine: FORESTCC_TRANSPORT=tcp makes every pair of ranks talk over
sockets as ranks on different hosts do (tests/test_cluster.py runs real emulated hosts).
Collectives against numpy over 1, 2 and 4 streams, send/recv, the interface and transport
settings and their errors."""
from __future__ import annotations

import pytest
from conftest import run_job

TCP = {"FORESTCC_TRANSPORT": "tcp"}


def _ok(result, n):
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    checked = result.lines("CHECKED")
    assert len(checked) == n and all(int(c.split()[1]) > 0 for c in checked), result.stdout[-2000:]


@pytest.mark.parametrize("n", [2, 3])
def test_every_collective_over_tcp(n):
    # every collective and op through auto; every built-in algorithm on float32
    _ok(run_job(n, "collectives_check.py", "all", "0,1,7,1001", "--reduction-sizes", "4099",
                "--dtypes", "float32,int64,bfloat16,uint8", "--algo-dtypes", "float32", env=TCP), n)


@pytest.mark.parametrize("streams", ["1", "4"])
def test_large_puts_spread_over_streams(streams):
    # 3 MiB blocks: puts cut into pieces over every stream, signals held until all have landed
    _ok(run_job(3, "collectives_check.py", "auto,ring,direct", "786433", "--dtypes", "float32",
                "--collectives", "all_reduce,all_gather,reduce_scatter,all_to_all",
                env={**TCP, "FORESTCC_TCP_STREAMS": streams}), 3)


def test_send_recv_over_tcp():
    res = run_job(3, "tcp_check.py", "p2p", env=TCP)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert sorted(res.lines("OK")) == [f"OK rank={r}" for r in range(3)]
    assert not res.lines("NO ERROR")
    mismatch = res.lines("MISMATCH")
    assert len(mismatch) == 2, res.stdout
    assert any("forestcc rank 0:" in m and "the matching recv expected 44 bytes" in m for m in mismatch)
    assert any("forestcc rank 1:" in m and "it sent 40 bytes" in m for m in mismatch)


@pytest.mark.parametrize("env", [TCP, {}], ids=["tcp", "auto"])
def test_a_forked_child_exits_without_disturbing_its_parents_communicator(env):
    # A child forked by a rank (after its communicator is made) that exits normally runs the
    # process's exit handlers: they must leave the parent's peers undisturbed (no goodbye for the
    # parent's tcp connections, which its peers would take for the parent leaving the job; no
    # shared memory of the parent's closed or removed). The child has no proxy thread, and the
    # exit handler's registry of transports is made afresh in it (goodbye_at_exit.cpp), so that a
    # lock held at the fork by another thread cannot hang its exit.
    res = run_job(3, "tcp_check.py", "fork", env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert res.lines("CHILD") == ["CHILD exit=7"], res.stdout
    assert sorted(res.lines("OK")) == [f"OK rank={r}" for r in range(3)], res.stdout


def test_auto_keeps_one_node_on_shared_memory():
    res = run_job(3, "tcp_check.py", "channels")
    assert res.returncode == 0, res.stdout + res.stderr
    kinds = {line.split()[2] for line in res.lines("CHANNEL")}
    assert kinds == {"cma"}, res.stdout
    res = run_job(3, "tcp_check.py", "channels", env=TCP)
    assert res.returncode == 0, res.stdout + res.stderr
    assert {line.split()[2] for line in res.lines("CHANNEL")} == {"tcp"}, res.stdout


def test_exact_interface_name_is_used():
    _ok(run_job(2, "collectives_check.py", "auto", "1,1001", "--dtypes", "float32",
                env={**TCP, "FORESTCC_SOCKET_IFNAME": "=lo"}), 2)


@pytest.mark.parametrize("spec", ["nosuchif0", "=l"])
def test_interface_that_matches_nothing_fails_at_init_listing_interfaces(spec):
    res = run_job(2, "tcp_check.py", "channels", env={**TCP, "FORESTCC_SOCKET_IFNAME": spec})
    assert res.returncode == 0, res.stdout + res.stderr
    inits = res.lines("INIT")
    assert len(inits) == 2, res.stdout
    for line in inits:
        assert line.split()[1] == "ValueError", line
        assert f"FORESTCC_SOCKET_IFNAME='{spec}' selects no interface" in line, line
        assert "lo (127.0.0.1)" in line, line


def test_ranks_that_choose_transports_differently_fail_at_init():
    res = run_job(3, "tcp_check.py", "mixed_env")
    assert res.returncode == 0, res.stdout + res.stderr
    inits = res.lines("INIT")
    assert len(inits) == 3, res.stdout
    assert all("FORESTCC_TRANSPORT is" in line and "every rank must set the same" in line for line in inits), res.stdout


def test_unknown_transport_name_is_an_error():
    res = run_job(2, "tcp_check.py", "channels", env={"FORESTCC_TRANSPORT": "tcp,infiniband"})
    assert res.returncode == 0, res.stdout + res.stderr
    inits = res.lines("INIT")
    assert len(inits) == 2 and all("'infiniband' is not a transport" in line for line in inits), res.stdout
