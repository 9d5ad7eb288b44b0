#!/usr/bin/env bash
# Session 21's compare_cpu.sh before/after, interleaved: before = 75ca324 (the base of the reviewed
# diff, ea1aa8c^; /tmp/before20-venv, a clean-clone install), after = 6a9fae5 (/tmp/ci21e-venv,
# the final CI's clean-clone install). Order: before, after, after2, before2.
set -u
cd "$(dirname "$0")"
for run in before:before20 after:ci21e after2:ci21e before2:before20; do
  name=${run%%:*}; venv=${run##*:}
  # shellcheck disable=SC1090
  source /tmp/$venv-venv/bin/activate
  bash ../../../compare_cpu.sh 2 "$name" > "$name.log" 2>&1
  deactivate
done
