#!/usr/bin/env bash
# perf/compare_cpu.sh's commands for 2 ranks without gloo (the old venv has no torch). $1: out dir
set -euo pipefail
out=$1; mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for coll in all_reduce all_gather all_to_all; do
  for memory in numpy forestcc; do
    mpirun -n 2 --oversubscribe forestcc-perf "$coll" -b 16 -e 64M -f 4 -n 20 -w 5 --compare mpi --memory "$memory" -J "$out/${coll}_${memory}.json" > "$out/${coll}_${memory}.txt"
  done
done
for memory in numpy forestcc; do
  mpirun -n 2 --oversubscribe forestcc-perf all_reduce -b 8 -e 8 -n 5000 -w 500 --compare mpi --memory "$memory" -J "$out/latency_${memory}.json" > "$out/latency_${memory}.txt"
done
