#!/usr/bin/env bash
# perf/compare_cpu.sh for two installs, interleaved so the machine's drift shows: runs named
# before, after, after2, before2 (in that order), each in OUTDIR/<name>/ with OUTDIR/<name>.log.
# Usage: perf/compare_cpu_ab.sh BEFORE_VENV AFTER_VENV [OUTDIR] [RANKS]   (each venv a forestcc
# install, e.g. from a clean clone of the commit). Tabulate: perf/compare_table.py before after
# after2 before2 (in OUTDIR). perf/ab/<session>/compare_cpu/run.sh records each session's call.
set -u
before=$1 after=$2 out=${3:-.} ranks=${4:-2}
compare="$(cd "$(dirname "$0")" && pwd)/compare_cpu.sh"
cd "$out"
for run in "before:$before" "after:$after" "after2:$after" "before2:$before"; do
  name=${run%%:*} venv=${run#*:}
  # shellcheck disable=SC1090,SC1091
  source "$venv/bin/activate"
  bash "$compare" "$ranks" "$name" > "$name.log" 2>&1
  deactivate
done
