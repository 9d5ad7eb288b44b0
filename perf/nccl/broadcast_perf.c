/* broadcast_perf: ncclBroadcast from -r (0), nccl-tests' table. busbw = algbw. */
#include "perf_common.h"

static size_t same(size_t count, int n) { (void)n; return count; }
static double factor(int n) { (void)n; return 1.0; }

static ncclResult_t run(float* send, float* recv, size_t count, int inPlace, int root, int rank, int n,
                        ncclComm_t comm) {
  (void)rank; (void)n;
  if (inPlace == 2) perfCopy(recv, send, count * sizeof(float));
  return ncclBroadcast(inPlace ? recv : send, recv, count, ncclFloat32, root, comm, perfStream());
}

static double expected(size_t i, size_t count, int root, int rank, int n) {
  (void)count; (void)rank; (void)n;
  return perfInput(root, i);
}

int main(int argc, char** argv) {
  const PerfCollective c = {"broadcast", 0, 1, 1, same, same, factor, run, expected};
  return perfMain(argc, argv, &c);
}
