/* Non-blocking communicators (ncclConfig_t.blocking = 0) on forestcc's shim, host buffers, under
 * forestcc-run: init, collectives and groups return ncclSuccess or ncclInProgress, and
 * ncclCommGetAsyncError is polled until the operation ended. Each mode prints "OK <mode> <rank>";
 * anything wrong prints "ERROR ..." and exits non-zero.
 *
 *   nonblocking_check collectives <dir>  all_reduce, all_gather, a send/recv ring group and two calls
 *                                        in a row without polling between them, each checked
 *   nonblocking_check inprogress <dir>   (2+ ranks) rank 0's all_reduce cannot finish before the
 *                                        others enter it, which they do only after rank 0 saw
 *                                        ncclInProgress from the call and from GetAsyncError;
 *                                        the same for ncclCommFinalize
 *   nonblocking_check errors <dir>       (2+ ranks) a count mismatch ends in an error seen by polling;
 *                                        a NULL buffer is refused at once, never ncclInProgress
 *   nonblocking_check abort <dir>        (2+ ranks) ncclCommAbort while rank 0's call is in progress
 *   nonblocking_check sendmismatch <dir> (2+ ranks) a send/recv size mismatch in a group ends in an
 *                                        error that stays
 *   nonblocking_check nothread <dir>     a call whose thread cannot start returns an error and
 *                                        leaves the communicator usable
 *   nonblocking_check groupabort <dir>   (2+ ranks) ncclCommAbort of one communicator of rank 0's
 *                                        group on two ends the group's call on both
 *   nonblocking_check fork <dir>         a call kept a thread for the next (call_threads.hpp); a
 *                                        child of fork() has none of it: its own 1-rank
 *                                        non-blocking communicator's call still runs
 *   nonblocking_check initabort <dir>    (2+ ranks) ncclCommAbort of inits whose peers never come:
 *                                        rank 0 as the root of a 2-rank job nobody joins, rank 1
 *                                        joining one whose root never starts; each abort returns
 *                                        (run with a FORESTCC_TIMEOUT far above the test's own);
 *                                        then rank 1 as a new rank of a grow of rank 0's 1-rank
 *                                        communicator that never grows: its abort returns too;
 *                                        and rank 0 as the coordinator of a non-blocking grow of
 *                                        a 1-rank communicator that rank 1 asks with a wrong size
 *                                        only: the parent's abort returns
 */
#include <sys/resource.h>
#include <sys/wait.h>

#include "check_common.h"

/* A call of a non-blocking communicator: ncclSuccess or ncclInProgress, then polled to success. */
#define NONBLOCKING(comm, call)                                                                      \
  do {                                                                                               \
    ncclResult_t r_ = (call);                                                                        \
    if (r_ != ncclSuccess && r_ != ncclInProgress)                                                   \
      FAIL("%s returned %d (%s): %s", #call, r_, ncclGetErrorString(r_), ncclGetLastError(comm));    \
    ncclResult_t s_ = pollToEnd(comm, #call);                                                        \
    if (s_ != ncclSuccess) FAIL("%s ended with %d: %s", #call, s_, ncclGetLastError(comm));          \
  } while (0)

static ncclComm_t nonBlockingCommOf(const char* dir, const char* idName) {
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  shareId(dir, idName, &id, rank == 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    FAIL("ncclCommInitRankConfig returned %d: %s", r, ncclGetLastError(NULL));
    exit(1);
  }
  if (pollToEnd(comm, "init") != ncclSuccess) {
    FAIL("init ended with an error: %s", ncclGetLastError(comm));
    exit(1);
  }
  return comm;
}

static ncclComm_t nonBlockingComm(const char* dir) { return nonBlockingCommOf(dir, "world.id"); }

static void modeCollectives(ncclComm_t comm) {
  enum { kCount = 1000 };
  float x[kCount], gathered[kCount * 4];
  for (int i = 0; i < kCount; ++i) x[i] = (float)(rank + i);
  NONBLOCKING(comm, ncclAllReduce(x, x, kCount, ncclFloat32, ncclSum, comm, NULL));
  for (int i = 0; i < kCount; ++i)
    if (x[i] != (float)(nranks * (nranks - 1) / 2 + nranks * i)) FAIL("all_reduce: x[%d] = %g", i, x[i]);

  float mine[3] = {(float)rank, (float)rank + 0.5f, -1};
  NONBLOCKING(comm, ncclAllGather(mine, gathered, 3, ncclFloat32, comm, NULL));
  for (int r = 0; r < nranks; ++r)
    if (gathered[r * 3] != r || gathered[r * 3 + 1] != r + 0.5f) FAIL("all_gather: block %d", r);

  /* a ring group: ncclGroupEnd is the call that returns ncclInProgress */
  int32_t out = rank * 7, in = -1;
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  CHECK(ncclGroupStart());
  CHECK(ncclSend(&out, 1, ncclInt32, next, comm, NULL));
  CHECK(ncclRecv(&in, 1, ncclInt32, prev, comm, NULL));
  NONBLOCKING(comm, ncclGroupEnd());
  if (in != prev * 7) FAIL("ring group: got %d", in);

  /* two calls without polling between them: the second runs after the first, both complete */
  double a = rank, b = 2.0 * rank;
  ncclResult_t r1 = ncclAllReduce(&a, &a, 1, ncclFloat64, ncclSum, comm, NULL);
  ncclResult_t r2 = ncclAllReduce(&b, &b, 1, ncclFloat64, ncclMax, comm, NULL);
  if ((r1 != ncclSuccess && r1 != ncclInProgress) || (r2 != ncclSuccess && r2 != ncclInProgress))
    FAIL("calls in a row returned %d and %d", r1, r2);
  if (pollToEnd(comm, "calls in a row") != ncclSuccess) FAIL("calls in a row: %s", ncclGetLastError(comm));
  if (a != nranks * (nranks - 1) / 2.0 || b != 2.0 * (nranks - 1)) FAIL("calls in a row: %g %g", a, b);

  NONBLOCKING(comm, ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
}

static void modeInProgress(ncclComm_t comm, const char* dir) {
  float x[64];
  for (int i = 0; i < 64; ++i) x[i] = (float)rank;
  if (rank == 0) {
    ncclResult_t r = ncclAllReduce(x, x, 64, ncclFloat32, ncclSum, comm, NULL);
    if (r != ncclInProgress) FAIL("an all_reduce the other ranks have not entered returned %d, not ncclInProgress", r);
    ncclResult_t state = ncclSuccess;
    CHECK(ncclCommGetAsyncError(comm, &state));
    if (state != ncclInProgress) FAIL("ncclCommGetAsyncError said %d while the others are away", state);
    touch(dir, "rank0.returned");
    if (pollToEnd(comm, "all_reduce") != ncclSuccess) FAIL("all_reduce: %s", ncclGetLastError(comm));
  } else {
    waitFor(dir, "rank0.returned");
    NONBLOCKING(comm, ncclAllReduce(x, x, 64, ncclFloat32, ncclSum, comm, NULL));
  }
  for (int i = 0; i < 64; ++i)
    if (x[i] != nranks * (nranks - 1) / 2.0f) FAIL("all_reduce: x[%d] = %g", i, x[i]);
  /* finalize waits for every rank: rank 0's is in progress until the others call theirs */
  if (rank == 0) {
    ncclResult_t r = ncclCommFinalize(comm);
    if (r != ncclInProgress) FAIL("a finalize the other ranks have not called returned %d, not ncclInProgress", r);
    touch(dir, "rank0.finalizing");
    if (pollToEnd(comm, "finalize") != ncclSuccess) FAIL("finalize: %s", ncclGetLastError(comm));
  } else {
    waitFor(dir, "rank0.finalizing");
    NONBLOCKING(comm, ncclCommFinalize(comm));
  }
  EXPECT_ERROR(ncclAllReduce(x, x, 64, ncclFloat32, ncclSum, comm, NULL), ncclInvalidUsage, "was finalized");
  CHECK(ncclCommDestroy(comm));
}

static void modeErrors(ncclComm_t comm) {
  float x[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  /* an argument error is returned by the call itself */
  EXPECT_ERROR(ncclAllReduce(NULL, x, 8, ncclFloat32, ncclSum, comm, NULL), ncclInvalidArgument, "sendbuff is NULL");
  ncclResult_t state = ncclInternalError;
  CHECK(ncclCommGetAsyncError(comm, &state));
  if (state != ncclSuccess) FAIL("a refused argument left the communicator in state %d", state);
  /* a mismatch is found while the call runs: polling ends in the error, never in success */
  ncclResult_t r = ncclAllReduce(x, x, rank == 0 ? 8 : 7, ncclFloat32, ncclSum, comm, NULL);
  state = r == ncclSuccess || r == ncclInProgress ? pollToEnd(comm, "mismatched all_reduce") : r;
  if (state == ncclSuccess) FAIL("ranks with different counts ended in success");
  else if (!strstr(ncclGetLastError(comm), "ncclAllReduce"))
    FAIL("the mismatch's error does not name the call: %s", ncclGetLastError(comm));
  /* the error stays (NCCL's async errors do): the program is expected to abort */
  CHECK(ncclCommGetAsyncError(comm, &state));
  if (state == ncclSuccess || state == ncclInProgress) FAIL("the mismatch's error did not stay (%d)", state);
  CHECK(ncclCommAbort(comm));
}

static void modeAbort(ncclComm_t comm, const char* dir) {
  char name[64];
  if (rank == 0) {
    for (int r = 1; r < nranks; ++r) { /* every init ended (the abort would fail one in progress) */
      snprintf(name, sizeof name, "rank%d.ready", r);
      waitFor(dir, name);
    }
    float x[4] = {0};
    ncclResult_t r = ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comm, NULL);
    if (r != ncclInProgress) FAIL("the all_reduce returned %d, not ncclInProgress", r);
    CHECK(ncclCommAbort(comm)); /* ends the call in progress: returns, never hangs */
    touch(dir, "rank0.aborted");
  } else {
    snprintf(name, sizeof name, "rank%d.ready", rank);
    touch(dir, name);
    waitFor(dir, "rank0.aborted"); /* never entered the all_reduce */
    CHECK(ncclCommAbort(comm));
  }
}

static void modeInitAbort(const char* dir) {
  ncclUniqueId id;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = NULL;
  if (rank == 0) {
    ncclUniqueId unused; /* its root (this process) never joins: rank 1 waits for an answer */
    CHECK(ncclGetUniqueId(&unused));
    writeId(dir, "rootless.id", &unused);
    CHECK(ncclGetUniqueId(&id));
  } else {
    shareId(dir, "rootless.id", &id, 0);
  }
  ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, rank == 0 ? 0 : 1, &config);
  if (r != ncclInProgress) FAIL("an init nobody completes returned %d, not ncclInProgress", r);
  ncclResult_t state = ncclSuccess;
  CHECK(ncclCommGetAsyncError(comm, &state));
  if (state != ncclInProgress) FAIL("an init nobody completes is in state %d, not ncclInProgress", state);
  CHECK(ncclCommAbort(comm)); /* ends the rendezvous: does not wait it out */
  char name[64];
  snprintf(name, sizeof name, "rank%d.aborted", rank);
  touch(dir, name);
  if (rank == 0) waitFor(dir, "rank1.aborted"); /* keeps the rootless id's socket open meanwhile */

  /* A new rank asks rank 0's grow invitation, which is never answered (no ncclCommGrow there). */
  if (rank == 0) {
    ncclUniqueId own, invitation;
    ncclComm_t alone = NULL;
    CHECK(ncclGetUniqueId(&own));
    CHECK(ncclCommInitRank(&alone, 1, own, 0));
    CHECK(ncclCommGetUniqueId(alone, &invitation));
    writeId(dir, "grow.id", &invitation);
    waitFor(dir, "rank1.growaborted"); /* keeps the invitation's socket open meanwhile */
    CHECK(ncclCommDestroy(alone));
  } else if (rank == 1) {
    ncclUniqueId invitation;
    ncclComm_t grown = NULL;
    shareId(dir, "grow.id", &invitation, 0);
    r = ncclCommGrow(NULL, 2, &invitation, 1, &grown, &config);
    if (r != ncclInProgress) FAIL("a grow nobody answers returned %d, not ncclInProgress", r);
    CHECK(ncclCommGetAsyncError(grown, &state));
    if (state != ncclInProgress) FAIL("a grow nobody answers is in state %d, not ncclInProgress", state);
    CHECK(ncclCommAbort(grown)); /* ends the wait for the answer: does not wait it out */
    touch(dir, "rank1.growaborted");
  }

  /* The coordinator's side: rank 0's non-blocking grow of a 1-rank communicator of its own waits
   * in the background for a new rank; rank 1 asks with a wrong size, is refused (so the wait has
   * begun), and never asks again; ncclCommAbort of the parent ends that wait. */
  if (rank == 0) {
    ncclUniqueId own, invitation;
    ncclComm_t alone = NULL, bigger = NULL;
    CHECK(ncclGetUniqueId(&own));
    r = ncclCommInitRankConfig(&alone, 1, own, 0, &config);
    if (r != ncclSuccess && r != ncclInProgress) FAIL("a 1-rank init returned %d", r);
    if (pollToEnd(alone, "the 1-rank init") != ncclSuccess) FAIL("the 1-rank init failed");
    CHECK(ncclCommGetUniqueId(alone, &invitation));
    r = ncclCommGrow(alone, 2, &invitation, -1, &bigger, &config);
    if (r != ncclInProgress) FAIL("a grow no new rank completes returned %d, not ncclInProgress", r);
    writeId(dir, "coordinated.id", &invitation);
    waitFor(dir, "rank1.refused");
    CHECK(ncclCommAbort(alone)); /* ends the wait for the new rank: does not wait it out */
    if (bigger) {
      if (pollToEnd(bigger, "the aborted grow's communicator") == ncclSuccess) FAIL("the aborted grow made a communicator");
      CHECK(ncclCommAbort(bigger));
    }
  } else if (rank == 1) {
    ncclUniqueId invitation;
    ncclComm_t wrong = NULL;
    shareId(dir, "coordinated.id", &invitation, 0);
    EXPECT_ERROR(ncclCommGrow(NULL, 3, &invitation, 1, &wrong, NULL), ncclInvalidUsage, "number of ranks");
    touch(dir, "rank1.refused");
  }
}

/* Rank 0 sends rank 1 eight floats, rank 1 receives seven, each in a group of its non-blocking
 * communicator: both polls end in ncclInvalidUsage naming the sizes, and the error stays (the
 * only report of a non-blocking call is its state, which must not read as success later). */
static void modeSendMismatch(ncclComm_t comm, const char* dir) {
  float x[8] = {0};
  char name[64];
  if (rank <= 1) {
    CHECK(ncclGroupStart());
    if (rank == 0) CHECK(ncclSend(x, 8, ncclFloat32, 1, comm, NULL));
    else CHECK(ncclRecv(x, 7, ncclFloat32, 0, comm, NULL));
    ncclResult_t r = ncclGroupEnd();
    ncclResult_t state = r == ncclSuccess || r == ncclInProgress ? pollToEnd(comm, "mismatched send/recv") : r;
    if (state != ncclInvalidUsage) FAIL("a send/recv size mismatch ended in %d, not ncclInvalidUsage: %s", state, ncclGetLastError(comm));
    else if (!strstr(ncclGetLastError(comm), rank == 0 ? "expected 28 bytes" : "it sent 32 bytes"))
      FAIL("the mismatch's error does not name the sizes: %s", ncclGetLastError(comm));
    CHECK(ncclCommGetAsyncError(comm, &state));
    if (state != ncclInvalidUsage) FAIL("the mismatch's error did not stay (%d)", state);
  }
  snprintf(name, sizeof name, "rank%d.done", rank);
  touch(dir, name);
  for (int r = 0; r < nranks; ++r) { /* an abort poisons the peers: not before they checked */
    snprintf(name, sizeof name, "rank%d.done", r);
    waitFor(dir, name);
  }
  CHECK(ncclCommAbort(comm));
}

/* Bytes of address space this process has mapped (/proc/self/statm, first field). */
static size_t mappedBytes(void) {
  unsigned long pages = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%lu", &pages) != 1) {
    FAIL("cannot read /proc/self/statm");
    exit(1);
  }
  fclose(f);
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* A call whose thread cannot be started (the address space capped a little above what is mapped,
 * so a thread's stack does not fit): the call returns an error at once, the communicator does not
 * stay ncclInProgress, and the next call (the cap lifted) runs. */
static ncclComm_t aloneNonBlocking(void) {
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  CHECK(ncclGetUniqueId(&id));
  ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  if (r != ncclSuccess && r != ncclInProgress) FAIL("a 1-rank init returned %d", r);
  if (pollToEnd(comm, "the 1-rank init") != ncclSuccess) FAIL("the 1-rank init failed");
  return comm;
}

static void modeFork(ncclComm_t comm) {
  float x[4] = {1, 2, 3, 4};
  NONBLOCKING(comm, ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comm, NULL)); /* its thread is kept */
  fflush(NULL);
  const pid_t child = fork();
  if (child == 0) {
    ncclComm_t alone = aloneNonBlocking();
    float y[2] = {5, 6};
    NONBLOCKING(alone, ncclAllReduce(y, y, 2, ncclFloat32, ncclSum, alone, NULL));
    if (y[0] != 5 || y[1] != 6) FAIL("the child's all_reduce gave %g %g", y[0], y[1]);
    fflush(NULL);
    _exit(failures ? 1 : 0); /* the parent's communicator is the parent's to end */
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    FAIL("the child of fork() failed (status %d)", status);
  NONBLOCKING(comm, ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comm, NULL));
  CHECK(ncclCommDestroy(comm));
}

/* The mode's first call on a call thread: no kept thread (call_threads.hpp) is idle to take it,
 * so it needs a new one, which the cap refuses. */
static void modeNoThread(ncclComm_t comm) {
  float x[4] = {1, 1, 1, 1};
  struct rlimit old, capped;
  getrlimit(RLIMIT_AS, &old);
  capped = old;
  capped.rlim_cur = mappedBytes() + (1 << 20);
  if (setrlimit(RLIMIT_AS, &capped) != 0) FAIL("setrlimit(RLIMIT_AS) failed");
  ncclResult_t r = ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comm, NULL);
  setrlimit(RLIMIT_AS, &old);
  if (r == ncclSuccess || r == ncclInProgress) {
    FAIL("a call with no room for its thread returned %d", r);
    pollToEnd(comm, "the capped call");
  } else {
    ncclResult_t state = ncclInProgress;
    CHECK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclInProgress) {
      FAIL("a call that never started left the communicator ncclInProgress");
      exit(1); /* every later call would wait for it */
    }
  }
  for (int i = 0; i < 4; ++i) x[i] = (float)rank;
  NONBLOCKING(comm, ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comm, NULL));
  if (x[0] != nranks * (nranks - 1) / 2.0f) FAIL("the call after it: %g", x[0]);
  CHECK(ncclCommDestroy(comm));
}

/* Rank 0's group spans two communicators, a and b; no other rank enters it. ncclCommAbort(a)
 * ends the group's call on b too (b poisoned, naming the abort), so it returns at once instead of
 * waiting for b's share to time out: the other ranks find their b poisoned by the abort, not by a
 * timeout. */
static void modeGroupAbort(const char* dir) {
  ncclComm_t a = nonBlockingCommOf(dir, "a.id"), b = nonBlockingCommOf(dir, "b.id");
  char name[64];
  if (rank == 0) {
    for (int r = 1; r < nranks; ++r) {
      snprintf(name, sizeof name, "rank%d.ready", r);
      waitFor(dir, name);
    }
    float x[4] = {0}, y[4] = {0};
    CHECK(ncclGroupStart());
    CHECK(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, a, NULL));
    CHECK(ncclAllReduce(y, y, 4, ncclFloat32, ncclSum, b, NULL));
    ncclResult_t r = ncclGroupEnd();
    if (r != ncclInProgress) FAIL("the group returned %d, not ncclInProgress", r);
    CHECK(ncclCommAbort(a));
    ncclResult_t state = pollToEnd(b, "the group on b");
    if (state == ncclSuccess) FAIL("the group ended in success on b after ncclCommAbort(a)");
    touch(dir, "rank0.aborted");
    for (int r = 1; r < nranks; ++r) { /* b's own abort would poison their b too */
      snprintf(name, sizeof name, "rank%d.checked", r);
      waitFor(dir, name);
    }
  } else {
    snprintf(name, sizeof name, "rank%d.ready", rank);
    touch(dir, name);
    waitFor(dir, "rank0.aborted"); /* never entered the group */
    const double deadline = now() + 60;
    ncclResult_t state = ncclSuccess;
    while (state == ncclSuccess && now() < deadline) {
      CHECK(ncclCommGetAsyncError(b, &state));
      if (state == ncclSuccess) usleep(1000);
    }
    if (state == ncclSuccess) FAIL("b was not poisoned after rank 0 aborted a communicator of its group");
    else if (!strstr(ncclGetLastError(b), "another communicator of the same non-blocking group"))
      FAIL("b was poisoned by something other than the abort of a: %s", ncclGetLastError(b));
    snprintf(name, sizeof name, "rank%d.checked", rank);
    touch(dir, name);
    CHECK(ncclCommAbort(a));
  }
  CHECK(ncclCommAbort(b));
}

int main(int argc, char** argv) {
  const char* mode = startProgram(argc, argv);
  const int many = nranks > 1;
  if (!strcmp(mode, "collectives")) modeCollectives(nonBlockingComm(argv[2]));
  else if (!strcmp(mode, "inprogress") && many) modeInProgress(nonBlockingComm(argv[2]), argv[2]);
  else if (!strcmp(mode, "errors") && many) modeErrors(nonBlockingComm(argv[2]));
  else if (!strcmp(mode, "abort") && many) modeAbort(nonBlockingComm(argv[2]), argv[2]);
  else if (!strcmp(mode, "groupabort") && many) modeGroupAbort(argv[2]);
  else if (!strcmp(mode, "initabort") && many) modeInitAbort(argv[2]);
  else if (!strcmp(mode, "nothread")) modeNoThread(nonBlockingComm(argv[2]));
  else if (!strcmp(mode, "fork")) modeFork(nonBlockingComm(argv[2]));
  else if (!strcmp(mode, "sendmismatch") && many) modeSendMismatch(nonBlockingComm(argv[2]), argv[2]);
  else {
    fprintf(stderr, "unknown mode %s (or too few ranks for it)\n", mode);
    return 2;
  }
  if (failures) return 1;
  printf("OK %s %d\n", mode, rank);
  return 0;
}
