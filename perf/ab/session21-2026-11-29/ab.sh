#!/usr/bin/env bash
# Session 21's before/after on the 2-core machine, 2 ranks, host memory, interleaved rounds:
#   before: /tmp/ci14-venv, a clean-clone install of bfd4464 (session 20's last code);
#   after:  /tmp/ci21a-venv, a clean-clone install of this session's code (the CI run's).
# Per-call overhead of an 8-byte all_reduce (perf/nccl/overhead/: C++ API, shim, Python), the
# shim's non-blocking all_reduce (shim_ar N nonblocking: config.blocking = 0, polled with
# sched_yield; when this was run, that mode was shim_nb.c here, now folded into shim_ar.c),
# and the shim's send/recv batches (sendrecv_perf, alltoall_sendrecv_perf of each install).
# Usage: bash ab.sh > ab.log 2>&1
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
ROUNDS=${ROUNDS:-3}
for v in ci14 ci21a; do
  # shellcheck disable=SC1090
  source /tmp/$v-venv/bin/activate
  SP=$(python -c "import forestcc, os; print(os.path.dirname(forestcc.__file__))")
  g++ -O2 -std=c++17 -I"$SP/include" "$ROOT/perf/nccl/overhead/cpp_ar.cpp" -o /tmp/cpp_ar_$v -L"$SP" -lforestcc -Wl,-rpath,"$SP"
  cc -O2 -I"$SP/include/nccl" "$ROOT/perf/nccl/overhead/shim_ar.c" -o /tmp/shim_ar_$v -L"$SP" -l:libnccl.so.2 -Wl,-rpath,"$SP"
  deactivate
done
for i in $(seq "$ROUNDS"); do
  for v in ci14 ci21a; do
    # shellcheck disable=SC1090
    source /tmp/$v-venv/bin/activate
    SP=$(python -c "import forestcc, os; print(os.path.dirname(forestcc.__file__))")
    echo "round $i $v cpp $(forestcc-run -n 2 /tmp/cpp_ar_$v 20000 2>&1 | tail -1)"
    echo "round $i $v shim $(forestcc-run -n 2 /tmp/shim_ar_$v 20000 2>&1 | tail -1)"
    echo "round $i $v python $(forestcc-run -n 2 python "$ROOT/perf/nccl/overhead/py_ar.py" 20000 2>&1 | tail -1)"
    echo "round $i $v nonblocking $(forestcc-run -n 2 /tmp/shim_ar_$v 2000 nonblocking 2>&1 | tail -1)"
    for p in sendrecv_perf alltoall_sendrecv_perf; do
      echo "round $i $v $p $(forestcc-run -n 2 "$SP/bin/nccl/$p" -b 64 -e 256K -f 4 -n 2000 -w 100 2>&1 |
        grep -E '^ +[0-9]' | awk '{printf "%s:%s ", $1, $6}')"
    done
    deactivate
  done
done
