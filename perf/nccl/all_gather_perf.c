/* all_gather_perf: ncclAllGather, nccl-tests' table (size: the gathered buffer). busbw = algbw * (n-1)/n. */
#include "perf_common.h"

static size_t one(size_t count, int n) { (void)n; return count; }
static size_t all(size_t count, int n) { return count * n; }
static double factor(int n) { return (double)(n - 1) / n; }

static ncclResult_t run(float* send, float* recv, size_t count, int inPlace, int root, int rank, int n,
                        ncclComm_t comm) {
  (void)root; (void)n;
  float* mine = recv + rank * count;  /* NCCL's in-place form: the input is this rank's block */
  if (inPlace == 2) perfCopy(mine, send, count * sizeof(float));
  return ncclAllGather(inPlace ? mine : send, recv, count, ncclFloat32, comm, perfStream());
}

static double expected(size_t i, size_t count, int root, int rank, int n) {
  (void)root; (void)rank; (void)n;
  return perfInput((int)(i / count), i % count);
}

int main(int argc, char** argv) {
  const PerfCollective c = {"all_gather", 0, 0, 1, one, all, factor, run, expected};
  return perfMain(argc, argv, &c);
}
