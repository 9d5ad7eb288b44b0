#!/bin/bash
# A/B of the reduce kernel: before (main df1190f's reduce_kernels.cpp) and after (every level), alternating.
AFTER=$1; BEFORE=/tmp/simd4-before/reduce_bench_before
D=float32,float64,float16,bfloat16,float8_e4m3,float8_e5m2,int8,int32,int64
for r in 1 2 3; do
  /usr/bin/time -f "after$r CPU %U+%S s maxrss %M KB" prlimit --as=4000000000 $AFTER --reps 15 --dtypes $D --json after$r.json > after$r.txt 2>>cpu.txt
  /usr/bin/time -f "before$r CPU %U+%S s maxrss %M KB" prlimit --as=4000000000 $BEFORE --reps 15 --levels v2 --dtypes $D --json before$r.json > before$r.txt 2>>cpu.txt
done
echo DONE >> cpu.txt
