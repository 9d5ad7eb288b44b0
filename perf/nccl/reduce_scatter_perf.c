/* reduce_scatter_perf: ncclReduceScatter (sum), nccl-tests' table. busbw = algbw * (n-1)/n. */
#include "perf_common.h"

static size_t all(size_t count, int n) { return count * n; }
static double factor(int n) { return (double)(n - 1) / n; }

/* In place, the input is the receive buffer itself (n blocks) and the result lands in block
 * `rank`; so both forms get a receive buffer of n blocks here and the check reads block `rank`. */
static ncclResult_t run(float* send, float* recv, size_t count, int inPlace, int root, int rank, int n,
                        ncclComm_t comm) {
  (void)root;
  if (inPlace == 2) perfCopy(recv, send, count * n * sizeof(float));
  if (inPlace) return ncclReduceScatter(recv, recv + rank * count, count, ncclFloat32, ncclSum, comm, perfStream());
  ncclResult_t r = ncclReduceScatter(send, recv + rank * count, count, ncclFloat32, ncclSum, comm, perfStream());
  return r;
}

static double expected(size_t i, size_t count, int root, int rank, int n) {
  (void)root;
  if (i / count != (size_t)rank) return 0.0 / 0.0; /* not this rank's block: not checked */
  double s = 0;
  for (int r = 0; r < n; ++r) s += perfInput(r, i);
  return s;
}

int main(int argc, char** argv) {
  const PerfCollective c = {"reduce_scatter", 1, 0, 1, all, all, factor, run, expected};
  return perfMain(argc, argv, &c);
}
