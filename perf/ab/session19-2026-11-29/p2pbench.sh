for i in 1 2 3 4; do
  for v in ci1 ci2; do
    source /tmp/$v-venv/bin/activate
    B=$(forestcc-config --nccl-perf)
    for prog in sendrecv_perf alltoall_sendrecv_perf; do
      for n in 2 3; do
        echo "== $v $prog n=$n run $i"
        forestcc-run -n $n $B/$prog -b 8 -e 16M -f 8 -n 50 -w 5 2>&1 | grep -E "^ +[0-9]"
      done
    done
    deactivate
  done
done
