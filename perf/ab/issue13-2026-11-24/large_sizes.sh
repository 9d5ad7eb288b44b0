#!/usr/bin/env bash
# Large sizes only, more iterations: the 16 and 64 MiB rows the speed bar names.
set -euo pipefail
which=$1; out=$2; mkdir -p "$out"
SYS=/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages
OLD=/tmp/venv-old/lib/python3.11/site-packages
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$which" = old ]; then PY=(python -S); export PYTHONPATH=/tmp/old-src/perf:$OLD:$SYS; else PY=(python); export PYTHONPATH=/work/main/perf; fi
for coll in all_reduce all_gather all_to_all; do
  for memory in numpy forestcc; do
    mpirun -n 2 --oversubscribe -x PYTHONPATH "${PY[@]}" -m forestcc_perf.cli "$coll" -b 16M -e 64M -f 4 -n 60 -w 10 \
      --compare mpi --memory "$memory" > "$out/${coll}_${memory}.txt"
  done
done
