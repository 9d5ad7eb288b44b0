"""forestcc-run: environment, labels, failure handling, Ctrl-C."""
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import PROGRAMS, clean_env, run_job


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_rank_environment_and_labels():
    code = ("import os; print('ENV', os.environ['FORESTCC_RANK'], os.environ['FORESTCC_SIZE'], "
            "os.environ['FORESTCC_LOCAL_RANK'], os.environ['FORESTCC_ROOT_ADDR'] != '')")
    p = subprocess.run([sys.executable, "-m", "forestcc.launcher", "-n", "3", "--label", "--",
                        sys.executable, "-c", code], env=clean_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.splitlines()) == [f"[{r}] ENV {r} 3 {r} True" for r in range(3)]


def test_failing_rank_stops_the_others_and_is_named():
    t0 = time.monotonic()
    res = run_job(3, "exit_code.py", "7")
    assert res.returncode == 7
    assert "forestcc-run: rank 1 (pid" in res.stderr and "exited with code 7" in res.stderr
    assert "stopping rank(s) 0, 2" in res.stderr
    assert time.monotonic() - t0 < 200  # the sleepers (600 s) were stopped, not waited for


def test_ctrl_c_stops_all_ranks():
    p = subprocess.Popen([sys.executable, "-m", "forestcc.launcher", "-n", "3", "--label",
                          sys.executable, str(PROGRAMS / "exit_code.py"), "sleep"],
                         env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    started = []
    while len(started) < 3:  # wait until every rank runs
        line = p.stdout.readline()
        assert line, p.stderr.read()
        started.append(line)
    pids = [int(x) for x in subprocess.run(["pgrep", "-f", "exit_code.py sleep"],
                                           capture_output=True, text=True).stdout.split()
            if int(x) != p.pid]
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130
    assert "received SIGINT; stopping all ranks" in err
    assert pids and not any(_alive(pid) for pid in pids)


def test_usage_errors():
    p = subprocess.run([sys.executable, "-m", "forestcc.launcher", "-n", "2"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "no command given" in p.stderr
    p = subprocess.run([sys.executable, "-m", "forestcc.launcher", "-n", "0", "true"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "-n must be at least 1" in p.stderr
    p = subprocess.run([sys.executable, "-m", "forestcc.launcher", "-n", "1",
                        "/nonexistent/program"], capture_output=True, text=True)
    assert p.returncode != 0 and "cannot start" in p.stderr
