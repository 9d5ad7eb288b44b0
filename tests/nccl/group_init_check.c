/* NCCL's single-thread multi-rank init on forestcc's shim: ncclCommInitRank (and InitRankConfig)
 * for several ranks of one communicator from one thread inside ncclGroupStart/End, which joins
 * them all at ncclGroupEnd. Under forestcc-run, host buffers; prints "OK <mode> <rank>".
 *
 *   group_init_check blocking <dir>     each process makes ranks 2p and 2p+1 of a 2n-rank
 *                                       communicator in one group, then all_reduces on both
 *   group_init_check nonblocking <dir>  the same with config.blocking = 0: ncclGroupEnd returns
 *                                       ncclInProgress (or success) and each is polled
 */
#include <time.h>

#include "check_common.h"

static void waitReady(ncclComm_t comm) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  const time_t deadline = t.tv_sec + 60;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    CHECK(ncclCommGetAsyncError(comm, &state));
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (state == ncclInProgress && t.tv_sec > deadline) {
      FAIL("still in progress after 60 s");
      exit(1);
    }
  }
  if (state != ncclSuccess) FAIL("the communicator ended in %d: %s", state, ncclGetLastError(comm));
}

static void run(const char* dir, int blocking) {
  ncclUniqueId id;
  shareId(dir, "group.id", &id, rank == 0);
  const int total = 2 * nranks;
  ncclComm_t comms[2] = {NULL, NULL};
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking;

  CHECK(ncclGroupStart());
  /* a bad argument is refused by the call itself, not deferred */
  ncclComm_t bad = NULL;
  EXPECT_ERROR(ncclCommInitRank(&bad, total, id, total), ncclInvalidArgument, "out of range");
  for (int i = 0; i < 2; ++i) CHECK(ncclCommInitRankConfig(&comms[i], total, id, 2 * rank + i, &config));
  ncclResult_t r = ncclGroupEnd();
  if (blocking ? r != ncclSuccess : r != ncclSuccess && r != ncclInProgress)
    FAIL("ncclGroupEnd of the inits returned %d: %s", r, ncclGetLastError(NULL));
  for (int i = 0; i < 2; ++i) {
    if (!blocking) waitReady(comms[i]);
    int count = 0, me = -1;
    CHECK(ncclCommCount(comms[i], &count));
    CHECK(ncclCommUserRank(comms[i], &me));
    if (count != total || me != 2 * rank + i) FAIL("comm %d: count %d rank %d", i, count, me);
  }

  /* one all_reduce per rank of this thread, in one group (each waits for the other) */
  double x[2][5];
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 5; ++k) x[i][k] = (2 * rank + i) * 10 + k;
  CHECK(ncclGroupStart());
  for (int i = 0; i < 2; ++i) CHECK(ncclAllReduce(x[i], x[i], 5, ncclFloat64, ncclSum, comms[i], NULL));
  r = ncclGroupEnd();
  if (r != ncclSuccess && !(r == ncclInProgress && !blocking)) FAIL("all_reduce group returned %d", r);
  for (int i = 0; i < 2; ++i) {
    if (!blocking) waitReady(comms[i]);
    for (int k = 0; k < 5; ++k)
      if (x[i][k] != 10.0 * total * (total - 1) / 2 + total * k) FAIL("comm %d: x[%d] = %g", i, k, x[i][k]);
  }
  for (int i = 0; i < 2; ++i) CHECK(ncclCommDestroy(comms[i]));
}

int main(int argc, char** argv) {
  const char* mode = startProgram(argc, argv);
  if (!strcmp(mode, "blocking")) run(argv[2], 1);
  else if (!strcmp(mode, "nonblocking")) run(argv[2], 0);
  else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  if (failures) return 1;
  printf("OK %s %d\n", mode, rank);
  return 0;
}
