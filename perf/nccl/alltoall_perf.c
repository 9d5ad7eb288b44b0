/* alltoall_perf: ncclAlltoAll, nccl-tests' table. busbw = algbw * (n-1)/n. */
#include "perf_common.h"

static size_t all(size_t count, int n) { return count * n; }
static double factor(int n) { return (double)(n - 1) / n; }

static ncclResult_t run(float* send, float* recv, size_t count, int inPlace, int root, int rank, int n,
                        ncclComm_t comm) {
  (void)root; (void)rank;
  if (inPlace == 2) perfCopy(recv, send, count * n * sizeof(float));
  return ncclAlltoAll(inPlace ? recv : send, recv, count, ncclFloat32, comm, perfStream());
}

/* block p of the output is block `rank` of rank p's input */
static double expected(size_t i, size_t count, int root, int rank, int n) {
  (void)root; (void)n;
  return perfInput((int)(i / count), rank * count + i % count);
}

int main(int argc, char** argv) {
  const PerfCollective c = {"alltoall", 0, 0, 1, all, all, factor, run, expected};
  return perfMain(argc, argv, &c);
}
