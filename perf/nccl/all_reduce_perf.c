/* all_reduce_perf: ncclAllReduce (sum), nccl-tests' table. busbw = algbw * 2(n-1)/n. */
#include <math.h>

#include "perf_common.h"

static size_t same(size_t count, int n) { (void)n; return count; }
static double factor(int n) { return 2.0 * (n - 1) / n; }

static ncclResult_t run(float* send, float* recv, size_t count, int inPlace, int root, int rank, int n,
                        ncclComm_t comm) {
  (void)root; (void)rank; (void)n;
  if (inPlace == 2) perfCopy(recv, send, count * sizeof(float));
  return ncclAllReduce(inPlace ? recv : send, recv, count, ncclFloat32, ncclSum, comm, perfStream());
}

static double expected(size_t i, size_t count, int root, int rank, int n) {
  (void)count; (void)root; (void)rank;
  double s = 0;
  for (int r = 0; r < n; ++r) s += perfInput(r, i);
  return s;
}

int main(int argc, char** argv) {
  const PerfCollective c = {"all_reduce", 1, 0, 1, same, same, factor, run, expected};
  return perfMain(argc, argv, &c);
}
