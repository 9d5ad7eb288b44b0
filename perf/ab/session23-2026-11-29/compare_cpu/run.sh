#!/usr/bin/env bash
# Session 23's compare_cpu.sh before/after, interleaved, on the session's 2-vCPU machine:
# before = a6066c9 (the code of 268b42a, the session's base; /tmp/ci22h-venv, a clean-clone
# install), after = this session's final CI clone install (/tmp/ci23c-venv). Order: before,
# after, after2, before2.
set -u
cd "$(dirname "$0")"
for run in before:ci22h after:ci23c after2:ci23c before2:ci22h; do
  name=${run%%:*}; venv=${run##*:}
  # shellcheck disable=SC1090
  source /tmp/$venv-venv/bin/activate
  bash ../../../compare_cpu.sh 2 "$name" > "$name.log" 2>&1
  deactivate
done
