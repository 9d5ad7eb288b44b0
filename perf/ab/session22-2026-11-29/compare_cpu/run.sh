#!/usr/bin/env bash
# Session 22's compare_cpu.sh before/after, interleaved, on the session's 2-vCPU AMD EPYC machine:
# before = 7f09528 (the base of the reviewed diff; /tmp/before22-venv, a clean-clone install),
# after = e8e1949 (/tmp/ci22g-venv, the final CI's clean-clone install). Order: before, after,
# after2, before2.
set -u
cd "$(dirname "$0")"
for run in before:before22 after:ci22g after2:ci22g before2:before22; do
  name=${run%%:*}; venv=${run##*:}
  # shellcheck disable=SC1090
  source /tmp/$venv-venv/bin/activate
  bash ../../../compare_cpu.sh 2 "$name" > "$name.log" 2>&1
  deactivate
done
