#!/usr/bin/env bash
# Per-call overhead (8-byte in-place all_reduce, host memory, 2 ranks; perf/nccl/overhead/) of the
# C++ API, the shim and Python, before (75ca324) and after (be9411d), interleaved, 5 rounds of
# 20,000 calls. Binaries: perf/nccl/README.md's two compile lines, once per venv, as
# /tmp/cpp_ar_<v> and /tmp/shim_ar_<v> (v: before20, ci11).
for i in 1 2 3 4 5; do
  for v in before20 ci11; do
    # shellcheck disable=SC1090
    source /tmp/$v-venv/bin/activate
    echo "$v cpp $(forestcc-run -n 2 /tmp/cpp_ar_$v 20000 2>&1 | tail -1)"
    echo "$v shim $(forestcc-run -n 2 /tmp/shim_ar_$v 20000 2>&1 | tail -1)"
    echo "$v python $(forestcc-run -n 2 python /work/main/perf/nccl/overhead/py_ar.py 20000 2>&1 | tail -1)"
    deactivate
  done
done
