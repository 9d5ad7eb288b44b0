#!/usr/bin/env bash
# Session 20's before/after of the CPU data path (the interpreter's eager-bank hook and packet
# cases, the control block's bank stride): forestcc-perf on 2 ranks, forestcc memory, in the
# order before, after, after, before. Usage: ab.sh BEFORE_VENV AFTER_VENV OUTDIR
set -euo pipefail
before=$1 after=$2 out=$3
mkdir -p "$out"
run() {  # venv label
  # shellcheck disable=SC1091
  source "$1/bin/activate"
  for coll in all_reduce all_gather all_to_all; do
    forestcc-run -n 2 forestcc-perf "$coll" -b 8 -e 4M -f 4 -n 200 -w 20 --memory forestcc \
      -J "$out/${coll}_$2.json" > "$out/${coll}_$2.txt"
  done
  forestcc-run -n 2 forestcc-perf all_reduce -b 8 -e 256K -f 4 -n 2000 -w 200 --algo eager \
    -J "$out/eager_$2.json" > "$out/eager_$2.txt"
  forestcc-run -n 2 forestcc-perf all_reduce -b 8 -e 8 -n 20000 -w 2000 -J "$out/latency_$2.json" \
    > "$out/latency_$2.txt"
  deactivate
}
run "$before" before
run "$after" after
run "$after" after2
run "$before" before2
