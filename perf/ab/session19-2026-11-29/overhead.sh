source /tmp/dev/bin/activate
for i in 1 2 3 4 5 6 7; do
  forestcc-run -n 2 /tmp/cpp_ar 20000
  forestcc-run -n 2 /tmp/shim_ar 20000
  forestcc-run -n 2 python /work/main/perf/nccl/overhead/py_ar.py 20000
done
