"""The NCCL shim (libnccl.so.2 from forestcc, docs/nccl-shim.md), tested without a GPU.

C programs in tests/nccl/ are compiled here against NCCL's own nccl.h (the nvidia-nccl-cu13 wheel
of the test extra, with tests/nccl/cuda_stubs/ for the CUDA headers it includes) and run on host
buffers under forestcc-run with 1, 3 and 4 ranks. They check every collective, datatype and
operator against a reference computed in the program, groups of send/recv, split communicators,
abort from another thread and every error path; each prints "OK <mode> <rank>". Beside them: the
ABI (symbols, SONAME, enum values and struct layouts against the wheel's header, every prototype),
forwarding to a fallback library (a fake one: tests/nccl/fake_nccl.c) and GPU pointers (a fake
driver: tests/nccl/fake_libcuda.c).
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import JOB_TIMEOUT, clean_env

import forestcc
from forestcc.config_cli import nccl_shim_path

HERE = Path(__file__).parent / "nccl"
STUBS = HERE / "cuda_stubs"
SHIM = nccl_shim_path()
FORESTCC_HEADER = SHIM.parent / "include" / "nccl" / "nccl.h"  # installed beside the shim


def _nccl_wheel() -> Path:
    # the nvidia-nccl-cu13 wheel (test extra): nvidia/nccl/{include,lib}
    import nvidia.nccl
    return Path(list(nvidia.nccl.__path__)[0])


WHEEL = _nccl_wheel()
WHEEL_HEADER_DIR = WHEEL / "include"
WHEEL_LIBRARY = WHEEL / "lib" / "libnccl.so.2"

# What PyTorch 2.14's libtorch_cuda.so imports from libnccl.so.2, plus what nccl-tests and RCCL
# builds need beside them (../shared/reference/nccl-abi.md).
PYTORCH_IMPORTS = """
ncclGetVersion ncclGetUniqueId ncclCommInitRank ncclCommInitRankConfig ncclCommInitRankScalable
ncclCommInitAll ncclCommSplit ncclCommShrink ncclCommGrow ncclCommGetUniqueId ncclCommCount
ncclCommUserRank ncclCommFinalize ncclCommDestroy ncclCommAbort ncclCommRevoke ncclCommGetAsyncError
ncclGetErrorString ncclGetLastError ncclCommSuspend ncclCommResume ncclCommMemStats ncclAllReduce
ncclBroadcast ncclBcast ncclReduce ncclAllGather ncclReduceScatter ncclAlltoAll ncclGather ncclSend
ncclRecv ncclGroupStart ncclGroupEnd ncclGroupSimulateEnd ncclRedOpCreatePreMulSum ncclRedOpDestroy
ncclMemAlloc ncclMemFree ncclCommRegister ncclCommDeregister ncclCommWindowRegister
ncclCommWindowDeregister ncclWinGetUserPtr ncclPutSignal ncclSignal ncclWaitSignal ncclDevCommCreate
ncclDevCommDestroy ncclGetLsaMultimemDevicePointer ncclGetPeerDevicePointer
""".split()
OTHER_NEEDS = ["ncclCommCuDevice", "ncclScatter", "ncclAllToAll"]


def _cc() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed (it built forestcc)"
    return cc


def _compile(*args: str) -> None:
    p = subprocess.run([_cc(), *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, " ".join(args) + "\n" + p.stderr[-5000:]


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> Path:
    """The test programs, built once: against the wheel's nccl.h, linked to the installed shim."""
    out = tmp_path_factory.mktemp("nccl-programs")
    nccl = ["-I", str(STUBS), "-I", str(WHEEL_HEADER_DIR)]
    link_shim = [f"-L{SHIM.parent}", "-l:libnccl.so.2", f"-Wl,-rpath,{SHIM.parent}"]
    _compile("-O1", "-Wall", "-Wno-format-overflow", *nccl, str(HERE / "nccl_check.c"), "-o",
             str(out / "nccl_check"), *link_shim, "-lpthread", "-lm", "-ldl")
    # the same program linked against the real NCCL, for LD_PRELOAD
    _compile("-O1", *nccl, str(HERE / "nccl_check.c"), "-o", str(out / "nccl_check_real"),
             f"-L{WHEEL_LIBRARY.parent}", "-l:libnccl.so.2", f"-Wl,-rpath,{WHEEL_LIBRARY.parent}",
             "-lpthread", "-lm", "-ldl")
    _compile("-O1", "-Wall", *nccl, str(HERE / "p2p_check.c"), "-o", str(out / "p2p_check"), *link_shim)
    for name in ("nonblocking_check", "group_init_check", "elastic_check"):
        _compile("-O1", "-Wall", *nccl, str(HERE / f"{name}.c"), "-o", str(out / name), *link_shim)
    _compile("-shared", "-fPIC", *nccl, str(HERE / "fake_nccl.c"), "-o", str(out / "fake_nccl.so"))
    _compile("-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", str(HERE / "fake_libcuda.c"), "-o",
             str(out / "libcuda_fake.so"))
    return out


def run_check(programs: Path, tmp_path: Path, n: int, mode: str, program: str = "nccl_check",
              args: tuple = (), **env: str) -> subprocess.CompletedProcess:
    rendezvous = tmp_path / f"{mode}-{n}"
    rendezvous.mkdir()
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", str(n), "--label",
           str(programs / program), mode, str(rendezvous), *args]
    return subprocess.run(cmd, env=clean_env(**env), capture_output=True, text=True,
                          timeout=JOB_TIMEOUT)


def assert_ok(p: subprocess.CompletedProcess, mode: str, n: int) -> None:
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    ok = sorted(line.split("] ", 1)[1] for line in p.stdout.splitlines() if "] OK " in line)
    assert ok == sorted(f"OK {mode} {r}" for r in range(n)), p.stdout[-4000:] + p.stderr[-2000:]
    assert "ERROR" not in p.stderr, p.stderr[-4000:]


# ---- the ABI --------------------------------------------------------------------------------------

def test_forestcc_config_prints_the_installed_shim():
    p = subprocess.run(["forestcc-config", "--nccl-shim"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.strip()) == SHIM and SHIM.is_file()
    p = subprocess.run(["forestcc-config", "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--nccl-shim" in p.stdout and "LD_PRELOAD" in p.stdout


@pytest.mark.parametrize("mode", [(), ("nonblocking",)])
def test_the_overhead_program_runs(tmp_path, mode, no_new_shm):
    # perf/nccl/overhead/shim_ar.c (the per-call figures of docs/nccl-shim.md), blocking and
    # non-blocking, a few calls: it builds against the wheel's nccl.h and prints its one line
    program = tmp_path / "shim_ar"
    _compile("-O1", "-Wall", "-I", str(STUBS), "-I", str(WHEEL_HEADER_DIR),
             str(HERE.parents[1] / "perf" / "nccl" / "overhead" / "shim_ar.c"), "-o", str(program),
             f"-L{SHIM.parent}", "-l:libnccl.so.2", f"-Wl,-rpath,{SHIM.parent}")
    p = subprocess.run([sys.executable, "-m", "forestcc.launcher", "-n", "2", str(program), "50", *mode],
                       env=clean_env(), capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    want = r"shim nonblocking [0-9.]+ us" if mode else r"shim [0-9.]+ us"
    assert re.fullmatch(want, p.stdout.strip()), p.stdout


def test_soname_and_exports():
    dynamic = subprocess.run(["readelf", "-d", "-W", str(SHIM)], capture_output=True, text=True,
                             timeout=60).stdout
    assert "Library soname: [libnccl.so.2]" in dynamic, dynamic
    # never unloaded: idle kept threads (call_threads.hpp) wait inside it
    assert re.search(r"FLAGS_1\)\s+Flags:.*\bNODELETE\b", dynamic), dynamic
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(SHIM)], capture_output=True,
                             text=True, timeout=60).stdout
    exported = {line.split()[-1] for line in symbols.splitlines() if line.strip()}
    missing = [s for s in PYTORCH_IMPORTS + OTHER_NEEDS if s not in exported]
    assert not missing, f"the shim lacks {missing}"
    assert len(PYTORCH_IMPORTS) == 51
    # every function NCCL's own headers declare (p-prefixed profiler aliases aside): nccl.h, and
    # the host side of the device API (nccl_device/host.h), whose calls take a communicator too
    header = (WHEEL_HEADER_DIR / "nccl.h").read_text()
    declared = set(re.findall(r"^\s*(?:ncclResult_t|const char\*|void)\s+(nccl\w+)\(", header, re.M))
    assert len(declared) > 60 and "ncclResetDebugInit" in declared
    device_host = (WHEEL_HEADER_DIR / "nccl_device" / "host.h").read_text()
    device_declared = set(re.findall(r"^NCCL_EXTERN_C\s+\w+\s+(nccl\w+)\(", device_host, re.M))
    assert {"ncclCommQueryProperties", "ncclTeamWorld", "ncclLLA2ACalcSlots"} <= device_declared
    assert sorted((declared | device_declared) - exported) == []
    # nothing but the NCCL API leaks out (the C++ internals stay local)
    assert all(s.startswith("nccl") for s in exported), sorted(s for s in exported
                                                               if not s.startswith("nccl"))


def test_version_is_the_emulated_nccl():
    lib = ctypes.CDLL(str(SHIM))
    version = ctypes.c_int(0)
    assert lib.ncclGetVersion(ctypes.byref(version)) == 0
    assert version.value == 23203


def test_enum_values_and_struct_layouts_match_the_wheel(tmp_path):
    outputs = []
    for include in (WHEEL_HEADER_DIR, FORESTCC_HEADER.parent):
        exe = tmp_path / f"layout-{len(outputs)}"
        _compile("-I", str(STUBS), "-I", str(include), str(HERE / "abi_layout.c"), "-o", str(exe))
        outputs.append(subprocess.run([str(exe)], capture_output=True, text=True,
                                      timeout=60).stdout)
    assert "NCCL_VERSION_CODE=23203" in outputs[0]
    assert outputs[0].count("\n") > 100
    assert outputs[1] == outputs[0]


def test_every_prototype_matches_the_wheel(tmp_path):
    # C refuses a redeclaration of a different type: the shim's header after NCCL's
    _compile("-fsyntax-only", "-Werror", "-I", str(STUBS), "-I", str(WHEEL_HEADER_DIR),
             f'-DFORESTCC_NCCL_HEADER="{FORESTCC_HEADER}"', str(HERE / "prototypes.c"))


# ---- native on host memory -----------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 3, 4])
@pytest.mark.parametrize("mode", ["collectives", "groups", "split", "comms", "abort", "errors", "inplace"])
def test_nccl_program(programs, tmp_path, mode, n, no_new_shm):
    # the error paths of NCCL-only APIs are those without a fallback, whatever is installed
    env = {"FORESTCC_NCCL_FALLBACK": str(tmp_path / "none.so")} if mode == "errors" else {}
    assert_ok(run_check(programs, tmp_path, n, mode, **env), mode, n)


def test_nccl_only_apis_forward_to_the_fallback():
    # ncclParamGetParameter exists only in NCCL: with the wheel's library as the fallback the call
    # reaches it (its answer is NCCL's), never the shim's "no fallback" refusal
    env = clean_env(FORESTCC_NCCL_FALLBACK=str(WHEEL_LIBRARY))
    code = ("import ctypes; lib = ctypes.CDLL(%r); v = ctypes.c_char_p(); n = ctypes.c_int(); "
            "r = lib.ncclParamGetParameter(b'NCCL_PROTO', ctypes.byref(v), ctypes.byref(n)); "
            "lib.ncclGetLastError.restype = ctypes.c_char_p; "
            "print('RESULT', r, lib.ncclGetLastError(None))" % str(SHIM))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "RESULT" in p.stdout and "no fallback" not in p.stdout, p.stdout
    assert "could not be loaded" not in p.stdout, p.stdout
    assert p.stdout.startswith("RESULT 0") or str(WHEEL_LIBRARY) in p.stdout, p.stdout


@pytest.mark.parametrize("n", [1, 3, 4])
@pytest.mark.parametrize("mode", ["alltoallv", "ring", "self", "mismatch"])
def test_send_recv_groups(programs, tmp_path, mode, n, no_new_shm):
    # a group's sends and receives run as one batch (p2p_check.c says what each mode checks)
    assert_ok(run_check(programs, tmp_path, n, mode, program="p2p_check"), mode, n)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("mode", ["split", "splitmismatch", "refused"])
def test_messages_match_in_order_whatever_the_groups(programs, tmp_path, mode, n, no_new_shm):
    # one group's sends received in several groups and the reverse, overlapping groups; a size
    # mismatch across groups fails both ranks and poisons (the pair could no longer match); a
    # refused send or receive (alone, in a group) still takes its place: its match fails, the
    # pair stays in step
    p = run_check(programs, tmp_path, n, mode, program="p2p_check", FORESTCC_TIMEOUT="60")
    assert_ok(p, mode, n)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_batch_on_the_cpp_api(tmp_path, n, no_new_shm):
    # Collectives::sendRecv itself (send_recv_batch.cpp): rings with messages to oneself, blocking
    # and async, a queued batch that a later blocking or queued recv must not overtake, and its
    # own argument checks, which the shim never reaches
    from forestcc import _C
    lib = Path(_C.__file__).parent
    program = tmp_path / "send_recv_batch"
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    p = subprocess.run([cxx, "-O1", "-std=c++17", f"-I{lib / 'include'}", str(HERE / "send_recv_batch.cpp"),
                        "-o", str(program), f"-L{lib}", "-lforestcc", f"-Wl,-rpath,{lib}"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-5000:]
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", str(n), "--label", str(program)]
    p = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    ok = sorted(line.split("] ", 1)[1] for line in p.stdout.splitlines() if "] OK " in line)
    assert ok == sorted(f"OK {r}" for r in range(n)), p.stdout[-4000:]


def _cuda_include() -> Path | None:
    """The CUDA toolkit's headers (NCCL's device-API header includes cuda.h), or None."""
    nvcc = shutil.which("nvcc")
    for root in ([Path(nvcc).resolve().parent.parent] if nvcc else []) + [
            Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))]:
        if (root / "include" / "cuda.h").exists():
            return root / "include"
    return None


@pytest.fixture(scope="module")
def device_api_check(tmp_path_factory) -> Path:
    """tests/nccl/device_api_check.cpp against the wheel's nccl.h and nccl_device/host.h."""
    cuda = _cuda_include()
    if cuda is None:
        pytest.skip("no CUDA toolkit headers (cuda.h), which NCCL's nccl_device/host.h includes")
    out = tmp_path_factory.mktemp("device-api") / "device_api_check"
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    p = subprocess.run([cxx, "-O1", "-std=c++17", "-Wall", "-Wno-unused-function", f"-I{cuda}",
                        f"-I{WHEEL_HEADER_DIR}", f"-I{HERE}", str(HERE / "device_api_check.cpp"), "-o",
                        str(out), f"-L{SHIM.parent}", "-l:libnccl.so.2", f"-Wl,-rpath,{SHIM.parent}"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-5000:]
    return out.parent


@pytest.mark.parametrize("n", [1, 3])
def test_device_api_host_calls_without_a_fallback(device_api_check, tmp_path, n, no_new_shm):
    # NCCL's device API: "no device API" from ncclCommQueryProperties (programs then take their
    # other path), the teams of such a communicator, and ncclInvalidUsage (or -1, or the empty
    # team) with a message for what only a fallback NCCL could do
    env = {"FORESTCC_NCCL_FALLBACK": str(tmp_path / "none.so")}
    assert_ok(run_check(device_api_check, tmp_path, n, "native", "device_api_check", **env), "native", n)


def test_device_api_calls_reach_the_fallback(device_api_check, tmp_path, no_new_shm):
    # ncclLLA2ACalcSlots (NCCL's sizing rule, no communicator) answered by the wheel's NCCL
    real = ctypes.CDLL(str(WHEEL_LIBRARY)).ncclLLA2ACalcSlots(1024, 16)
    assert real > 0
    p = run_check(device_api_check, tmp_path, 1, "fallback", "device_api_check", (str(real),),
                  FORESTCC_NCCL_FALLBACK=str(WHEEL_LIBRARY))
    assert_ok(p, "fallback", 1)


@pytest.mark.parametrize("n", [3, 4])
def test_a_send_without_its_receive_times_out_and_poisons(programs, tmp_path, n, no_new_shm):
    # the sender's wait ends at FORESTCC_TIMEOUT with ncclTimeout, and every rank's next call fails
    p = run_check(programs, tmp_path, n, "unmatched", program="p2p_check", FORESTCC_TIMEOUT="3")
    assert_ok(p, "unmatched", n)


@pytest.mark.parametrize("mode,n", [("collectives", 1), ("collectives", 3), ("collectives", 4),
                                    ("nothread", 1), ("nothread", 3), ("fork", 1), ("fork", 2)] +
                         [(mode, n) for mode in ("inprogress", "errors", "sendmismatch", "abort", "groupabort") for n in (3, 4)])
def test_non_blocking_communicators(programs, tmp_path, mode, n, no_new_shm):
    # calls return ncclInProgress and ncclCommGetAsyncError is polled (nonblocking_check.c; the
    # modes other than collectives, nothread and fork need peers); a short timeout makes a call that blocked (the
    # others enter only after it returned) fail fast
    p = run_check(programs, tmp_path, n, mode, program="nonblocking_check", FORESTCC_TIMEOUT="30")
    assert_ok(p, mode, n)


@pytest.mark.parametrize("n", [2, 3])
def test_abort_ends_a_non_blocking_init_whose_peers_never_come(programs, tmp_path, n, no_new_shm):
    # the rendezvous would wait FORESTCC_TIMEOUT (an hour here): ncclCommAbort ends it, on the
    # root (nobody joins), on a joining rank (the root never starts) and on a new rank of a grow
    # (its invitation is never answered); without that, this test
    # fails at JOB_TIMEOUT
    p = run_check(programs, tmp_path, n, "initabort", program="nonblocking_check", FORESTCC_TIMEOUT="3600")
    assert_ok(p, "initabort", n)


@pytest.mark.parametrize("n", [1, 3, 4])
@pytest.mark.parametrize("mode", ["blocking", "nonblocking", "split", "splitnonblocking", "shrink",
                                  "shrinknonblocking", "grow", "grownonblocking"])
def test_several_ranks_initialised_from_one_thread_in_a_group(programs, tmp_path, mode, n,
                                                            no_new_shm):
    # each process makes two ranks of one communicator between ncclGroupStart and ncclGroupEnd
    # (they join at ncclGroupEnd: done one after the other, the first would wait for the second);
    # the split modes then split both ranks from that one thread, in a group (blocking) or one
    # after the other with non-blocking configs (each split returns before the other is called:
    # its agreement runs at ncclGroupEnd, or in the background); the shrink and grow modes do the
    # same with ncclCommShrink (the last rank excluded) and ncclCommGrow (one new rank per process,
    # made by the same thread)
    p = run_check(programs, tmp_path, n, mode, program="group_init_check", FORESTCC_TIMEOUT="30")
    assert_ok(p, mode, n)


@pytest.mark.parametrize("mode,n", [("shrink", 1), ("shrink", 3), ("shrink", 4), ("errors", 1),
                                    ("errors", 3), ("dead", 2), ("dead", 3), ("dead", 4),
                                    ("revoke", 3), ("revoke", 4), ("mismatch", 3), ("mismatch", 4),
                                    ("abortshrink", 3), ("abortshrink", 4), ("grow", 2),
                                    ("grow", 3), ("grow", 4)])
def test_shrink_revoke_and_grow(programs, tmp_path, mode, n, no_new_shm):
    # ncclCommShrink of a healthy parent, after a rank died (the parent's rank 0 itself: its
    # bootstrap root), with NCCL_SHRINK_ABORT ending a call in flight, and after ncclCommRevoke;
    # survivors that pass different lists all get an error; ncclCommGrow with a coordinator that
    # is not rank 0; every argument check (elastic_check.c says what each mode checks). The dead rank is found by the parent's failing
    # call, not by waiting out FORESTCC_TIMEOUT, which is only there to end a hang.
    p = run_check(programs, tmp_path, n, mode, program="elastic_check", FORESTCC_TIMEOUT="60")
    assert_ok(p, mode, n)


@pytest.mark.parametrize("n", [3, 4])
def test_a_shrink_a_survivor_left_fails_and_the_next_works(programs, tmp_path, n, no_new_shm):
    # the last survivor refuses its flags: every survivor fails at once; then it does not call:
    # the new rank 0 waits for its answer until FORESTCC_TIMEOUT (short here), those that
    # answered hear of the failure at once; the next shrink works, its offer told from the stale
    # one (elastic_check.c, shrinkfail)
    p = run_check(programs, tmp_path, n, "shrinkfail", program="elastic_check", FORESTCC_TIMEOUT="5")
    assert_ok(p, "shrinkfail", n)


@pytest.mark.parametrize("mode", ["mismatch", "premulmismatch"])
@pytest.mark.parametrize("n", [3, 4])
def test_ranks_that_disagree_get_an_error(programs, tmp_path, n, mode, no_new_shm):
    # a count (mismatch), or PreMulSum against Sum (premulmismatch: both sum, of scaled inputs on
    # one rank only, which returned success with a mixed result before its stamp said so)
    assert_ok(run_check(programs, tmp_path, n, mode), mode, n)


@pytest.mark.parametrize("mode", ["refused", "refusedgroup", "refusedlate"])
@pytest.mark.parametrize("n", [2, 3])
def test_a_call_one_rank_refused_fails_on_every_rank(programs, tmp_path, n, mode, no_new_shm):
    # rank 1's call is refused and it goes on: without the refusal in the call's place its next
    # all_reduce met the others' first and both returned ncclSuccess with mixed data (the long
    # timeout makes a hang a failure, not a pass)
    assert_ok(run_check(programs, tmp_path, n, mode, FORESTCC_TIMEOUT="300"), mode, n)


def test_ld_preload_replaces_the_real_nccl(programs, tmp_path, no_new_shm):
    # linked against NCCL itself (which needs a GPU), run with the shim preloaded: forestcc runs it
    p = run_check(programs, tmp_path, 3, "groups", program="nccl_check_real",
                  LD_PRELOAD=str(SHIM))
    assert_ok(p, "groups", 3)


# ---- forwarding and GPU pointers -------------------------------------------------------------------

def test_forced_operation_without_a_fallback_is_refused(programs, tmp_path, no_new_shm):
    missing = tmp_path / "no-such-libnccl.so.2"
    p = run_check(programs, tmp_path, 3, "forced", FORESTCC_NCCL_FORCE="AllReduce",
                  FORESTCC_NCCL_FALLBACK=str(missing))
    assert_ok(p, "forced", 3)
    assert f"the fallback NCCL {missing} could not be loaded" in p.stdout, p.stdout[-3000:]


def test_forced_operation_with_the_real_nccl_and_no_gpu_is_refused(programs, tmp_path,
                                                                   no_new_shm):
    from forestcc import _C
    if _C.cuda_device_count() > 0:
        pytest.skip("a GPU is visible: the real NCCL would run the forced call")
    p = run_check(programs, tmp_path, 2, "forced", FORESTCC_NCCL_FORCE="allreduce",
                  FORESTCC_NCCL_FALLBACK=str(WHEEL_LIBRARY))
    assert_ok(p, "forced", 2)
    assert f"ncclCommInitRank of {WHEEL_LIBRARY} failed" in p.stdout, p.stdout[-3000:]


def test_forced_operations_and_their_groups_run_in_the_fallback(programs, tmp_path, no_new_shm):
    p = run_check(programs, tmp_path, 3, "forwarded", FORESTCC_NCCL_FORCE="AllReduce",
                  FORESTCC_NCCL_FALLBACK=str(programs / "fake_nccl.so"))
    assert_ok(p, "forwarded", 3)
    # the group of a broadcast and a forced all_reduce went there whole, between one start/end
    assert p.stdout.count("fake-nccl ncclBroadcast") == 3, p.stdout
    assert p.stdout.count("fake-nccl ncclAllReduce") == 6, p.stdout


def test_a_bad_force_list_fails_init(programs, tmp_path, no_new_shm):
    p = run_check(programs, tmp_path, 1, "forced", FORESTCC_NCCL_FORCE="AllReduce,Bogus")
    assert p.returncode != 0
    assert "FORESTCC_NCCL_FORCE names 'Bogus'" in p.stderr, p.stderr[-3000:]


def test_the_shim_itself_is_refused_as_its_fallback(programs, tmp_path, no_new_shm):
    p = run_check(programs, tmp_path, 1, "forced", FORESTCC_NCCL_FORCE="AllReduce",
                  FORESTCC_NCCL_FALLBACK=str(SHIM))
    assert_ok(p, "forced", 1)
    assert "is forestcc's own shim, not an NCCL library" in p.stdout, p.stdout[-3000:]


def test_gpu_pointers_mixed_with_host_pointers_are_refused(programs, tmp_path, no_new_shm):
    # a fake driver makes 0xdead0000 "GPU memory" (nccl_check.c, modeDevice); without CUDA in the
    # build a call on GPU memory only is refused too (no fallback)
    from forestcc import _C
    args = () if _C.built_with_cuda() else ("no-cuda-build",)
    p = run_check(programs, tmp_path, 2, "device", args=args,
                  LD_PRELOAD=str(programs / "libcuda_fake.so"))
    assert_ok(p, "device", 2)


def test_cuda_loaded_after_the_first_calls_is_seen(programs, tmp_path, no_new_shm):
    # a communicator made after the program loaded CUDA recognises GPU pointers
    p = run_check(programs, tmp_path, 2, "device-late",
                  FORESTCC_TEST_LIBCUDA=str(programs / "libcuda_fake.so"))
    assert_ok(p, "device-late", 2)


def test_the_knobs_are_in_the_config_table():
    p = subprocess.run(["forestcc", "config"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "FORESTCC_NCCL_FALLBACK" in p.stdout and "FORESTCC_NCCL_FORCE" in p.stdout


# ---- perf/nccl: the nccl-tests-style programs, smoke-tested on host memory -----------------------

PERF_PROGRAMS = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "alltoall_sendrecv", "broadcast",
                 "sendrecv"]


@pytest.mark.parametrize("name", PERF_PROGRAMS)
def test_perf_program_prints_the_nccl_tests_table(name, tmp_path, no_new_shm):
    folder = Path(subprocess.run(["forestcc-config", "--nccl-perf"], capture_output=True,
                                 text=True, timeout=60).stdout.strip())
    n = 3 if name in ("all_reduce", "alltoall", "alltoall_sendrecv") else 2
    cmd = [sys.executable, "-m", "forestcc.launcher", "-n", str(n), str(folder / f"{name}_perf"),
           "-b", "8", "-e", "1K", "-f", "4", "-n", "2", "-w", "1"]
    p = subprocess.run(cmd, env=clean_env(NCCL_PERF_ID_FILE=str(tmp_path / "id")),
                       capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = p.stdout.splitlines()
    assert any("#wrong" in line and "algbw" in line and "busbw" in line for line in lines)
    assert "#  NCCL version code 23203" in p.stdout
    rows = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    assert len(rows) == 4, p.stdout  # 8, 32, 128, 512 bytes (rounded to whole elements per rank)
    for row in rows:
        assert len(row) == 13 and row[2] == "float", row
        assert row[8] == "0", f"wrong elements: {row}"
        assert row[12] in ("0", "N/A"), row
    assert lines[-1] == f"# Collective test concluded: {name}"
    assert "# Avg bus bandwidth" in p.stdout
