/* sendrecv_perf: each rank sends to the next and receives from the previous in one group
 * (ncclSend + ncclRecv), nccl-tests' table. busbw = algbw. No in-place form. */
#include "perf_common.h"

static size_t same(size_t count, int n) { (void)n; return count; }
static double factor(int n) { (void)n; return 1.0; }

static ncclResult_t run(float* send, float* recv, size_t count, int inPlace, int root, int rank, int n,
                        ncclComm_t comm) {
  (void)inPlace; (void)root;
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) r = ncclSend(send, count, ncclFloat32, (rank + 1) % n, comm, perfStream());
  if (r == ncclSuccess) r = ncclRecv(recv, count, ncclFloat32, (rank + n - 1) % n, comm, perfStream());
  ncclResult_t end = ncclGroupEnd();
  return r != ncclSuccess ? r : end;
}

static double expected(size_t i, size_t count, int root, int rank, int n) {
  (void)count; (void)root;
  return perfInput((rank + n - 1) % n, i);
}

int main(int argc, char** argv) {
  const PerfCollective c = {"sendrecv", 0, 0, 0, same, same, factor, run, expected};
  return perfMain(argc, argv, &c);
}
