#!/usr/bin/env bash
# Two more runs, the machine otherwise idle (the first "before" ran while builds were compiling):
# after3 (6a9fae5, /tmp/ci21e-venv), then before3 (75ca324, /tmp/before20-venv).
set -u
cd "$(dirname "$0")"
for run in after3:ci21e before3:before20; do
  name=${run%%:*}; venv=${run##*:}
  # shellcheck disable=SC1090
  source /tmp/$venv-venv/bin/activate
  bash ../../../compare_cpu.sh 2 "$name" > "$name.log" 2>&1
  deactivate
done
