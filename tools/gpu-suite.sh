#!/usr/bin/env bash
# The GPU suite, for a machine with an NVIDIA GPU: build and install forestcc from this checkout,
# run tests/test_gpu*.py, run the GPU benchmark (perf/gpu/gpu_bench.py). Run from the repo root:
#
#   tools/gpu-suite.sh [all|build|test|bench]...     (default: all = build test bench)
#
# Results go to $OUT (default ./gpu-suite-out), nine files at most:
#   gpu-suite.txt    machine facts, MPS state, each phase's status and time, the summary
#   gpu-build.txt    the pip build log
#   gpu-tests.txt    pytest -v output (tests/test_gpu*.py)
#   gpu-bench.txt    the benchmark's tables;  gpu-bench.json  its results
#   gpu-bench-eager-on.txt/.json, gpu-bench-eager-off.txt/.json  the same up to 64 KiB with
#                    algo=eager (the GPU scratch banks), FORESTCC_PACKETS on and off, to set
#                    against auto's small sizes (GPU_SUITE_EAGER=0 skips them)
#
# CUDA MPS is started when it can be (several processes share the GPU's SMs instead of being
# time-sliced) and stopped at the end; GPU_SUITE_MPS=0 runs without it. Each phase is time-boxed
# (SIGINT first, so pytest still prints its summary) within GPU_SUITE_BUDGET seconds in all
# (default 530), and a failing phase does not stop the next. Knobs: GPU_SUITE_BUILD_S (200),
# GPU_SUITE_BENCH_S (100), GPU_SUITE_PYTEST_ARGS (extra pytest arguments, e.g. "-k feature"),
# GPU_SUITE_BENCH_ARGS (extra benchmark arguments, e.g. "-e 256M"), GPU_SUITE_ARCH (90),
# GPU_SUITE_FIRST (comma-separated pieces of test ids run before the rest, in that order, so a
# time box cuts what matters least; default: the tests of code that has not run on a GPU yet,
# FIRST_DEFAULT below; "" keeps pytest's order).
# Exit status: 0 when every phase run passed.
#
# Through the device tool (600 s per command): tests/test_gpu*.py took 322 s on an H100 with MPS
# (perf/gpu/results-h100-2026-11-24-s11) and the build 55 s before the simulator and the per-ISA
# reduce kernels were added, so `all` in one call cuts the last test files (the torch backend's)
# at the time box. Run `tools/gpu-suite.sh build` first, then `tools/gpu-suite.sh test bench`
# (the tool gives each call an empty $OUT; locally, use two OUT folders: gpu-suite.txt is rewritten).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-suite-out}
mkdir -p "$OUT"
LOG="$OUT/gpu-suite.txt"
: >"$LOG"
START=$SECONDS
BUDGET=${GPU_SUITE_BUDGET:-530}
PHASES=("$@")
[ ${#PHASES[@]} -eq 0 ] && PHASES=(all)
want() {
  local p
  for p in "${PHASES[@]}"; do [ "$p" = all ] || [ "$p" = "$1" ] && return 0; done
  return 1
}
for p in "${PHASES[@]}"; do
  case $p in all | build | test | bench) ;; *) echo "usage: $0 [all|build|test|bench]..." >&2; exit 2 ;; esac
done
say() { echo "$*" | tee -a "$LOG"; }
left() { echo $((BUDGET - (SECONDS - START))); }
# A phase's time box: its cap, within what is left after reserving `reserve` seconds for later phases.
box() {
  local cap=$1 reserve=$2 l
  l=$(($(left) - reserve))
  [ "$l" -lt "$cap" ] && cap=$l
  [ "$cap" -lt 30 ] && cap=30
  echo "$cap"
}
declare -A STATUS
# The GPU code written since the last GPU run (session 11's, perf/gpu/results-h100-2026-11-24-s11)
# has run nowhere: its tests first. Whoever runs the suite on a GPU and sees these pass trims this.
# Grouped by file: test_gpu_nccl_shim.py builds its programs once per run of its tests in a row.
FIRST_DEFAULT="test_eager_plans_on_gpu,test_cuda_graph_capture_and_replay"
FIRST_DEFAULT+=",test_non_blocking_calls_on_gpu_memory,test_torch_collectives_on_the_shim"
FIRST_DEFAULT+=",test_async_error_shows_a_failure_on_the_gpu,test_send_recv_on_buffers_freed_and_allocated_again"
FIRST_DEFAULT+=",test_jax_gpu_arrays"
FIRST_DEFAULT+=",test_gpu_p2p.py::test_feature,test_every_collective_dtype_op_and_layout"

say "# forestcc GPU suite, $(date -u +%Y-%m-%dT%H:%M:%SZ), phases: ${PHASES[*]}, budget ${BUDGET} s"
say "# commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode,clocks.max.sm --format=csv 2>&1
  nvidia-smi -L 2>&1
  command -v nvcc >/dev/null && nvcc --version | tail -2
  nproc
  python3 - <<'EOF' 2>&1
import platform
print("python", platform.python_version())
for name in ("numpy", "torch", "cupy", "jax", "ml_dtypes", "pytest"):
    try:
        module = __import__(name)
        print(name, module.__version__)
    except Exception as e:  # report, never stop: the phases say what is missing
        print(name, "unavailable:", e)
try:
    import torch
    print("torch cuda", torch.version.cuda, "available", torch.cuda.is_available())
except Exception:
    pass
EOF
} 2>&1 | sed 's/^/# /' | tee -a "$LOG"

# -- MPS --------------------------------------------------------------------------------------
MPS=off
if [ "${GPU_SUITE_MPS:-1}" != 0 ] && command -v nvidia-cuda-mps-control >/dev/null; then
  if nvidia-cuda-mps-control -d >>"$LOG" 2>&1; then
    # A client must be able to run under it; else stop it and go on without.
    if timeout 60 python3 -c "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()" >>"$LOG" 2>&1; then
      MPS=on
      say "# MPS: started (server list: $(echo get_server_list | nvidia-cuda-mps-control 2>&1 | tr '\n' ' '))"
    else
      say "# MPS: the daemon started but a CUDA client failed under it: stopped, running without MPS"
      echo quit | nvidia-cuda-mps-control >>"$LOG" 2>&1
      sleep 1
    fi
  else
    say "# MPS: nvidia-cuda-mps-control -d failed: running without MPS (kernels time-sliced)"
  fi
elif [ "${GPU_SUITE_MPS:-1}" = 0 ]; then
  say "# MPS: off (GPU_SUITE_MPS=0): kernels of different processes are time-sliced"
else
  say "# MPS: nvidia-cuda-mps-control not found: running without MPS"
fi
export FORESTCC_GPU_MPS="$MPS"
stop_mps() {
  if [ "$MPS" = on ]; then
    echo quit | nvidia-cuda-mps-control >>"$LOG" 2>&1 && say "# MPS: stopped"
    MPS=stopped
  fi
}
trap stop_mps EXIT

# -- build ------------------------------------------------------------------------------------
installed_with_cuda() {
  (cd /tmp && python3 -c "import forestcc._C as C, forestcc.cuda; assert C.built_with_cuda()") >/dev/null 2>&1
}
build() {
  local t reserve=0
  want test && reserve=$((reserve + 180))
  want bench && reserve=$((reserve + ${GPU_SUITE_BENCH_S:-100}))
  t=$(box "${GPU_SUITE_BUILD_S:-200}" "$reserve")
  say "== build (time box ${t} s)"
  local s=$SECONDS
  # No registry there: no index, no dependencies, no build isolation (the build requirements are
  # installed). FORESTCC_CUDA=ON fails the build loudly when nvcc is missing.
  FORESTCC_CUDA=ON CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) PIP_NO_INDEX=1 PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 timeout -s INT -k 20 "$t" \
    python3 -m pip install -v --no-build-isolation --no-deps --force-reinstall \
    -C cmake.define.FORESTCC_CUDA_ARCHITECTURES="${GPU_SUITE_ARCH:-90}" \
    -C build-dir=build/gpu-suite . >"$OUT/gpu-build.txt" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] && ! installed_with_cuda; then
    echo "installed, but forestcc._C is not built with CUDA or forestcc.cuda is missing" >>"$OUT/gpu-build.txt"
    rc=1
  fi
  tail -n 5 "$OUT/gpu-build.txt" | sed 's/^/   /' | tee -a "$LOG"
  STATUS[build]="rc=$rc, $((SECONDS - s)) s"
  say "== build: ${STATUS[build]}"
  return $rc
}
if want build; then
  build
elif ! installed_with_cuda; then
  say "# forestcc is not installed with CUDA here (a fresh machine?): building first"
  build
fi

# -- test -------------------------------------------------------------------------------------
if want test; then
  reserve=10
  want bench && reserve=${GPU_SUITE_BENCH_S:-100}
  t=$(box 100000 "$reserve")
  say "== test (time box ${t} s)"
  s=$SECONDS
  # shellcheck disable=SC2086  # GPU_SUITE_PYTEST_ARGS is split on purpose
  say "   first: ${GPU_SUITE_FIRST-$FIRST_DEFAULT}"
  FORESTCC_TESTS_FIRST="${GPU_SUITE_FIRST-$FIRST_DEFAULT}" \
    timeout -s INT -k 30 "$t" python3 -m pytest tests/test_gpu*.py -v -ra -p no:cacheprovider \
    --durations=20 ${GPU_SUITE_PYTEST_ARGS:-} >"$OUT/gpu-tests.txt" 2>&1
  rc=$?
  STATUS[test]="rc=$rc, $((SECONDS - s)) s: $(grep -E '^=+ .*(passed|failed|error|skipped).* =+$' "$OUT/gpu-tests.txt" | tail -1 | tr -d '=')"
  [ $rc -eq 124 ] || [ $rc -eq 130 ] && STATUS[test]+=" (time box reached)"
  grep -E '^(FAILED|ERROR) ' "$OUT/gpu-tests.txt" | head -40 | sed 's/^/   /' | tee -a "$LOG"
  say "== test: ${STATUS[test]}"
fi

# -- bench ------------------------------------------------------------------------------------
if want bench; then
  t=$(box "${GPU_SUITE_BENCH_S:-100}" 5)
  budget=$((t - 60))  # the collectives; the rest is start-up and the bounds
  [ $budget -lt 20 ] && budget=20
  say "== bench (time box ${t} s, collectives budget ${budget} s)"
  s=$SECONDS
  # shellcheck disable=SC2086
  FORESTCC_TIMEOUT=120 timeout -s INT -k 20 "$t" python3 -m forestcc.launcher -n 4 \
    python3 perf/gpu/gpu_bench.py --budget "$budget" --json "$OUT/gpu-bench.json" \
    ${GPU_SUITE_BENCH_ARGS:-} >"$OUT/gpu-bench.txt" 2>&1
  rc=$?
  grep -E '^# (Avg bus bandwidth|HBM bound|Collective test concluded|MPS|Skipped)' "$OUT/gpu-bench.txt" \
    | sed 's/^/   /' | tee -a "$LOG"
  # algo=eager (GPU scratch banks) up to 64 KiB, its data as packets (the default) and as
  # signals, to set against auto's small sizes above.
  for packets in on off; do
    [ "${GPU_SUITE_EAGER:-1}" != 0 ] && [ "$(left)" -gt 40 ] || break
    # shellcheck disable=SC2086
    FORESTCC_PACKETS=$packets FORESTCC_TIMEOUT=120 timeout -s INT -k 20 40 python3 -m forestcc.launcher -n 4 \
      python3 perf/gpu/gpu_bench.py --algo eager -e 64K --budget 15 --json "$OUT/gpu-bench-eager-$packets.json" \
      >"$OUT/gpu-bench-eager-$packets.txt" 2>&1
    erc=$?
    [ $rc -eq 0 ] && rc=$erc
    grep -E '^# (Latency|Out of bounds)' "$OUT/gpu-bench-eager-$packets.txt" | sed "s/^/   eager, packets $packets: /" \
      | tee -a "$LOG"
  done
  STATUS[bench]="rc=$rc, $((SECONDS - s)) s"
  say "== bench: ${STATUS[bench]}"
fi

stop_mps
say "== summary ($((SECONDS - START)) s, MPS ${FORESTCC_GPU_MPS})"
fail=0
for p in build test bench; do
  if [ -n "${STATUS[$p]:-}" ]; then
    say "   $p: ${STATUS[$p]}"
    case ${STATUS[$p]} in rc=0,*) ;; *) fail=1 ;; esac
  fi
done
say "   files: $(cd "$OUT" && ls | tr '\n' ' ')"
exit $fail
