for i in 1 2 3 4 5 6 7 8; do
  for v in ci1 ci2; do
    source /tmp/$v-venv/bin/activate
    B=$(forestcc-config --nccl-perf)
    echo "== $v sendrecv_perf n=3 run $i"
    forestcc-run -n 3 $B/sendrecv_perf -b 8 -e 2M -f 8 -n 100 -w 10 2>&1 | grep -E "^ +[0-9]"
    deactivate
  done
done
