/* alltoall_sendrecv_perf: all-to-all as one group of ncclSend/ncclRecv to and from every rank (self
 * included), the way nccl-tests' alltoall and torch's all_to_all_single issue it, nccl-tests'
 * table. busbw = algbw * (n-1)/n. No in-place form. */
#include "perf_common.h"

static size_t all(size_t count, int n) { return count * n; }
static double factor(int n) { return (double)(n - 1) / n; }

static ncclResult_t run(float* send, float* recv, size_t count, int inPlace, int root, int rank, int n,
                        ncclComm_t comm) {
  (void)inPlace; (void)root; (void)rank;
  ncclResult_t r = ncclGroupStart();
  for (int p = 0; p < n && r == ncclSuccess; ++p) r = ncclSend(send + p * count, count, ncclFloat32, p, comm, perfStream());
  for (int p = 0; p < n && r == ncclSuccess; ++p) r = ncclRecv(recv + p * count, count, ncclFloat32, p, comm, perfStream());
  ncclResult_t end = ncclGroupEnd();
  return r != ncclSuccess ? r : end;
}

/* block p of the output is block `rank` of rank p's input */
static double expected(size_t i, size_t count, int root, int rank, int n) {
  (void)root; (void)n;
  return perfInput((int)(i / count), rank * count + i % count);
}

int main(int argc, char** argv) {
  const PerfCollective c = {"alltoall_sendrecv", 0, 0, 0, all, all, factor, run, expected};
  return perfMain(argc, argv, &c);
}
