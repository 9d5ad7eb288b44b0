#!/usr/bin/env bash
# Old (66e2a07, its own venv and perf harness) against new (this checkout), 2 ranks, with Open MPI
# in the same launch. Usage: ab.sh large|latency old|new DIR
#   large:   all_reduce, all_gather, all_to_all on numpy and forestcc memory at 16 and 64 MiB
#   latency: the 8-byte all_reduce, 5000 iterations
set -euo pipefail
what=$1; which=$2; out=$3; mkdir -p "$out"
SYS=/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages
OLD=/tmp/venv-old/lib/python3.11/site-packages
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$which" = old ]; then PY=(python -S); export PYTHONPATH=/tmp/old-src/perf:$OLD:$SYS; else PY=(python); export PYTHONPATH=/work/main/perf; fi
perf() { mpirun -n 2 --oversubscribe -x PYTHONPATH "${PY[@]}" -m forestcc_perf.cli "$@" --compare mpi; }
for memory in numpy forestcc; do
  if [ "$what" = latency ]; then
    perf all_reduce -b 8 -e 8 -n 5000 -w 500 --memory "$memory" > "$out/latency_${memory}.txt"
  else
    for coll in all_reduce all_gather all_to_all; do
      perf "$coll" -b 16M -e 64M -f 4 -n 60 -w 10 --memory "$memory" > "$out/${coll}_${memory}.txt"
    done
  fi
done
