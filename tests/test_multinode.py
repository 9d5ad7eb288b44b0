"""forestcc across emulated hosts (forestcc.cluster: network, UTS and mount namespaces, so each
host has its own hostname and /dev/shm): ranks on one host use shared memory, ranks on others
tcp. Every collective against numpy on 2x2, 3x2 and 2x3 hosts x ranks, a rank killed on one
host, and a host whose link is cut mid-collective."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
from conftest import PROGRAMS, clean_env, host_shm_segments, run_cluster_job


@pytest.mark.parametrize("hosts,per_host", [(2, 2), (3, 2), (2, 3)])
def test_every_collective_across_hosts(cluster_of, no_new_shm, hosts, per_host):
    cluster = cluster_of(hosts)
    n = hosts * per_host
    res = run_cluster_job(cluster, per_host, "collectives_check.py", "all", "0,1,7,1001",
                          "--reduction-sizes", "4099", "--algo-dtypes", "float32")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    checked = res.lines("CHECKED")
    assert len(checked) == n and all(int(c.split()[1]) > 0 for c in checked), res.stdout[-2000:]
    assert not any(host_shm_segments(cluster).values()), "shared memory left on a host"


def test_a_rank_killed_on_one_host_fails_every_rank(cluster_of):
    cluster = cluster_of(2)
    res = run_cluster_job(cluster, 2, "multinode_faults.py", "kill", env={"FORESTCC_TIMEOUT": "120"})
    assert res.returncode != 0
    assert re.search(r"rank 3 on h1 \(pid \d+\) was killed by signal 9", res.stderr), res.stderr
    # The others raise on their own (the launcher stops them too, but only after one of them
    # exits): at least the first to notice names rank 3, and none hangs.
    errors = res.lines("ERROR")
    assert errors, res.stdout[-3000:] + res.stderr[-3000:]
    assert any("rank 3 (pid" in e and "closed its connection without a goodbye" in e for e in errors), res.stdout
    assert not any(host_shm_segments(cluster).values()), "shared memory left on a host"


def test_a_rank_that_exits_early_says_goodbye_and_a_wait_on_it_fails_at_once(cluster_of):
    # Rank 0 ends its process right after a collective, without destroying its communicator,
    # while the others still use theirs: its exit must be a goodbye, not a death that poisons
    # them (CI, stop 27: a rank still in its last call was aborted), and a later put to it or
    # wait on it must fail at once naming it (FORESTCC_TIMEOUT is far beyond the job's timeout).
    cluster = cluster_of(2)
    res = run_cluster_job(cluster, 2, "multinode_faults.py", "leave", env={"FORESTCC_TIMEOUT": "900"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert sorted(res.lines("HEALTHY")) == [f"HEALTHY rank={r}" for r in (1, 2, 3)], res.stdout
    errors = res.lines("ERROR")
    assert len(errors) == 4 and not res.lines("FLUSHED"), res.stdout  # a put and a recv on each of h1
    assert all("peer=0" in e and "rank 0 (" in e and "left the job" in e for e in errors), errors
    assert not any(host_shm_segments(cluster).values()), "shared memory left on a host"


def test_a_cut_link_mid_collective_names_the_silent_host(cluster_of):
    cluster = cluster_of(2)
    cmd = cluster.launcher_argv(2, [sys.executable, str(PROGRAMS / "multinode_faults.py"), "cut"], ("--label",))
    proc = subprocess.Popen(cmd, env=clean_env(FORESTCC_TIMEOUT="8"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        seen = 0
        while seen < 4:  # every rank is in the loop before the cut
            line = proc.stdout.readline()
            if not line:
                break
            seen += "READY" in line
        assert seen == 4, proc.stderr.read()
        time.sleep(1)
        cluster.cut(cluster.hosts[1])
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.restore(cluster.hosts[1])
    assert proc.returncode != 0
    errors = [ln for ln in out.splitlines() if "ERROR" in ln]
    assert errors, out + err
    # A rank timed out waiting for a rank across the cut and says which host that rank is on
    # (which side times out first depends on the machine's load).
    assert any("TimeoutError" in e and re.search(r"rank \d on host 'h[01]'", e) for e in errors), out


def test_tune_across_hosts_writes_rules_for_that_node_count(cluster_of, tmp_path):
    # forestcc-perf --tune on ranks of two hosts: the node-layout algorithms are measured and
    # eager is not (auto never runs it across nodes); the rules it writes hold for 2 nodes only,
    # so the one-node rules and the shipped ones for other node counts keep serving those.
    cluster = cluster_of(2)
    out = tmp_path / "tuning.json"
    cmd = cluster.launcher_argv(2, [sys.executable, "-m", "forestcc_perf.cli", "--tune", "all_to_all",
                                    "-b", "256", "-e", "4K", "-f", "16", "-n", "2", "-w", "1",
                                    "--tune-repeats", "1", "--tune-output", str(out)])
    p = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    headers = [ln.split()[2:] for ln in p.stdout.splitlines() if ln.startswith("#        bytes")]
    assert headers and all("2dh" in h and "eager" not in h for h in headers), headers
    from forestcc import tuning
    table = tuning.validate_table(json.loads(out.read_text()), str(out))
    assert "(4 ranks, 2 nodes, private memory)" in table["source"], table["source"]
    assert table["rules"] and all(
        (r["collective"], r["min_ranks"], r["max_ranks"], r["min_nodes"], r["max_nodes"])
        == ("all_to_all", 4, 4, 2, 2) for r in table["rules"]), table["rules"]
