#!/bin/bash
# 2-rank forestcc-perf all_reduce, before (main df1190f, CPU-only build) and after (simd4), alternating rounds.
out=/tmp/simd4-bench/perf; mkdir -p $out
BEFORE_PY=/tmp/simd4-venv-before/bin/python; AFTER_PY=/work/wt-simd4/.venv/bin/python
run() {  # tag python pythonpath dtype round
  local tag=$1 py=$2 pp=$3 dt=$4 r=$5
  PYTHONPATH=$pp /usr/bin/time -f "$tag $dt $r CPU %U+%S s maxrss %M KB wall %e" prlimit --as=4000000000 \
    $py -m forestcc.launcher -n 2 $py -m forestcc_perf.cli all_reduce -d $dt -b 64K -e 64M -f 4 -n 50 -w 10 \
    --memory ${MEMORY:-forestcc} -J $out/$tag-$dt-$r.json > $out/$tag-$dt-$r.txt 2>>$out/cpu.txt
}
for r in 1 2 3; do
  for dt in float bfloat16 half; do
    run after $AFTER_PY "" $dt $r
    run before $BEFORE_PY /tmp/simd4-before-site:/tmp/simd4-main-src/python:/tmp/simd4-main-src/perf $dt $r
  done
done
echo DONE >> $out/cpu.txt
