#!/usr/bin/env bash
set -euo pipefail
which=$1; out=$2; mkdir -p "$out"
SYS=/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages
OLD=/tmp/venv-old/lib/python3.11/site-packages
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$which" = old ]; then PY=(python -S); export PYTHONPATH=/tmp/old-src/perf:$OLD:$SYS; else PY=(python); export PYTHONPATH=/work/main/perf; fi
for memory in numpy forestcc; do
  mpirun -n 2 --oversubscribe -x PYTHONPATH "${PY[@]}" -m forestcc_perf.cli all_reduce -b 8 -e 8 -n 5000 -w 500 \
    --compare mpi --memory "$memory" > "$out/latency_${memory}.txt"
done
