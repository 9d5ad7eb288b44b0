/* 8-byte in-place all_reduce through the NCCL shim on a non-blocking communicator (config.blocking = 0): each call polled with ncclCommGetAsyncError, sched_yield between polls; mean per call of N. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>
#include "nccl.h"
int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 5000;
  int rank = atoi(getenv("FORESTCC_RANK")), n = atoi(getenv("FORESTCC_SIZE"));
  ncclUniqueId id; ncclComm_t comm;
  char path[512], tmp[600];  /* rank 0's id reaches the others through a file named after the job */
  snprintf(path, sizeof path, "/tmp/forestcc-overhead-%s.id", getenv("FORESTCC_JOB_ID"));
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (rank == 0) { ncclGetUniqueId(&id); FILE* f = fopen(tmp, "wb"); fwrite(&id, sizeof id, 1, f); fclose(f); rename(tmp, path); }
  else { for (;;) { FILE* f = fopen(path, "rb"); if (f && fread(&id, sizeof id, 1, f) == 1) { fclose(f); break; } if (f) fclose(f); usleep(1000); } }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER; cfg.blocking = 0;
  ncclResult_t st; if (ncclCommInitRankConfig(&comm, n, id, rank, &cfg) != ncclInProgress) return 1;
  do ncclCommGetAsyncError(comm, &st); while (st == ncclInProgress);
  if (rank == 0) unlink(path);
  float x[2] = {1, 2};
  for (int i = 0; i < 500; ++i) { ncclAllReduce(x, x, 2, ncclFloat32, ncclSum, comm, NULL); do { ncclCommGetAsyncError(comm, &st); if (st == ncclInProgress) sched_yield(); } while (st == ncclInProgress); }
  struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < iters; ++i) { ncclAllReduce(x, x, 2, ncclFloat32, ncclSum, comm, NULL); do { ncclCommGetAsyncError(comm, &st); if (st == ncclInProgress) sched_yield(); } while (st == ncclInProgress); }
  clock_gettime(CLOCK_MONOTONIC, &b);
  if (rank == 0) printf("shim nonblocking %.2f us\n", ((b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3) / iters);
  ncclCommDestroy(comm); return 0;
}
