/* ncclCommShrink, ncclCommRevoke and ncclCommGrow on forestcc's shim, host buffers, under
 * forestcc-run. Each mode prints "OK <mode> <rank>"; anything wrong prints "ERROR ..." and exits
 * non-zero.
 *
 *   elastic_check shrink <dir>    healthy parent (NCCL_SHRINK_DEFAULT): the survivors of excluding the
 *                                last rank, then of excluding rank 0 (renumbered; a non-blocking
 *                                config, polled), run all_reduce and broadcast on the new
 *                                communicator while the excluded rank does not call; with one rank,
 *                                an empty list
 *   elastic_check dead <dir>      (2+ ranks) rank 0, the parent's bootstrap root, exits without a
 *                                word; the survivors' next all_reduce fails, they shrink with
 *                                NCCL_SHRINK_ABORT and all_reduce on the new communicator
 *   elastic_check abortshrink <dir> (3+ ranks) a thread of rank 0 waits in a receive from rank 1,
 *                                which never sends; rank 0's NCCL_SHRINK_ABORT (the last rank
 *                                excluded, alive) ends that receive, naming the shrink
 *   elastic_check shrinkfail <dir> (3+ ranks; short FORESTCC_TIMEOUT) the last survivor refuses its
 *                                flags: every survivor fails at once (it ncclInvalidArgument, the
 *                                others ncclInvalidUsage naming it); then it does not call: the new
 *                                rank 0 times out waiting for its answer, the survivors that
 *                                answered hear of it at once; then all shrink, which works (the
 *                                offer still waiting for the silent rank is recognised as stale)
 *   elastic_check revoke <dir>    (2+ ranks) the last rank exits; the survivors' all_reduce fails,
 *                                they revoke the parent, poll ncclCommGetAsyncError to ncclSuccess,
 *                                see a collective refused, shrink (NCCL_SHRINK_DEFAULT) and run
 *   elastic_check mismatch <dir>  (3+ ranks) rank 1 excludes nobody while the others exclude the last
 *                                rank: every survivor gets ncclInvalidUsage naming both lists, and
 *                                the parent still works for every rank
 *   elastic_check grow <dir>     (2+ ranks) ranks 0..n-2 make a communicator; its rank 1 (rank 0
 *                                with two ranks) makes the grow id, which the last rank takes
 *                                after two refused tries (an existing rank's number, another
 *                                size); all n grow into one communicator and run on it
 *   elastic_check errors <dir>    every argument ncclCommShrink, ncclCommRevoke and ncclCommGrow
 *                                refuse, with its message (a grow where no existing rank passes
 *                                the id: on every rank), and the parent still works
 */
#include <pthread.h>

#include "check_common.h"

/* all_reduce of `mine` over comm must give `want`; a broadcast from its rank 0 must give `root`. */
static void checkComm(ncclComm_t comm, int wantSize, int wantRank, double mine, double want, double root) {
  int size = -1, r = -1;
  CHECK(ncclCommCount(comm, &size));
  CHECK(ncclCommUserRank(comm, &r));
  if (size != wantSize || r != wantRank)
    FAIL("the new communicator is rank %d of %d; expected rank %d of %d", r, size, wantRank, wantSize);
  double v[3] = {mine, 2 * mine, 3 * mine};
  CHECK(ncclAllReduce(v, v, 3, ncclFloat64, ncclSum, comm, NULL));
  for (int i = 0; i < 3; ++i)
    if (v[i] != (i + 1) * want) FAIL("all_reduce[%d] on the new communicator gave %g; expected %g", i, v[i], (i + 1) * want);
  double b = r == 0 ? root : -1;
  CHECK(ncclBroadcast(&b, &b, 1, ncclFloat64, 0, comm, NULL));
  if (b != root) FAIL("broadcast on the new communicator gave %g; expected %g", b, root);
}

static double sumOfRanks(int from, int to) { /* (from + 1) + ... + (to + 1) */
  double s = 0;
  for (int r = from; r <= to; ++r) s += r + 1;
  return s;
}

/* Every rank's all_reduce on the parent still works after `what`; then the parent is destroyed. */
static void expectParentWorks(ncclComm_t world, const char* what) {
  double v = rank + 1;
  CHECK(ncclAllReduce(&v, &v, 1, ncclFloat64, ncclSum, world, NULL));
  if (v != sumOfRanks(0, nranks - 1)) FAIL("the parent's all_reduce after %s gave %g", what, v);
  CHECK(ncclCommDestroy(world));
}

static void modeShrink(const char* dir) {
  ncclComm_t world = worldComm(dir);
  ncclComm_t shrunk = NULL;
  if (nranks == 1) {
    CHECK(ncclCommShrink(world, NULL, 0, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
    checkComm(shrunk, 1, 0, 1, 1, 7);
    CHECK(ncclCommDestroy(shrunk));
    CHECK(ncclCommDestroy(world));
    return;
  }
  /* The last rank is excluded: it does not call, the others keep their numbers. */
  int last = nranks - 1;
  if (rank != last) {
    CHECK(ncclCommShrink(world, &last, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
    checkComm(shrunk, nranks - 1, rank, rank + 1, sumOfRanks(0, nranks - 2), 11);
    CHECK(ncclCommDestroy(shrunk));
  }
  /* Rank 0 is excluded: the others are renumbered from 0, in their old order; the new
   * communicator is non-blocking and is polled. */
  int first = 0;
  if (rank != first) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommShrink(world, &first, 1, &shrunk, &config, NCCL_SHRINK_DEFAULT);
    if (r != ncclSuccess && r != ncclInProgress) FAIL("a non-blocking shrink returned %d: %s", r, ncclGetLastError(NULL));
    if (pollToEnd(shrunk, "the non-blocking shrink") != ncclSuccess) FAIL("the non-blocking shrink failed");
    /* a collective of a non-blocking communicator: enqueue, then poll */
    int size = -1, newRank = -1;
    CHECK(ncclCommCount(shrunk, &size));
    CHECK(ncclCommUserRank(shrunk, &newRank));
    if (size != nranks - 1 || newRank != rank - 1)
      FAIL("after excluding rank 0, rank %d is rank %d of %d; expected %d of %d", rank, newRank, size, rank - 1, nranks - 1);
    double v = rank + 1;
    r = ncclAllReduce(&v, &v, 1, ncclFloat64, ncclSum, shrunk, NULL);
    if (r != ncclSuccess && r != ncclInProgress) FAIL("all_reduce returned %d", r);
    if (pollToEnd(shrunk, "all_reduce") != ncclSuccess) FAIL("all_reduce on the non-blocking shrunk communicator failed");
    if (v != sumOfRanks(1, nranks - 1)) FAIL("all_reduce after excluding rank 0 gave %g; expected %g", v, sumOfRanks(1, nranks - 1));
    CHECK(ncclCommDestroy(shrunk));
  }
  /* The parent is untouched by shrinks that took its ranks apart. */
  expectParentWorks(world, "the shrinks");
}

/* The parent's next all_reduce must fail: a peer died. */
static void expectFailure(ncclComm_t world) {
  double v = 1;
  ncclResult_t r = ncclAllReduce(&v, &v, 1, ncclFloat64, ncclSum, world, NULL);
  if (r == ncclSuccess) FAIL("an all_reduce with a dead peer succeeded");
  else if (r != ncclRemoteError && r != ncclSystemError && r != ncclTimeout)
    FAIL("an all_reduce with a dead peer returned %d (%s): %s", r, ncclGetErrorString(r), ncclGetLastError(NULL));
}

static void dieNow(const char* mode) {
  printf("OK %s %d\n", mode, rank);
  fflush(stdout);
  _exit(0); /* no destroy, no exit handlers: to its peers this rank died */
}

static void modeDead(const char* dir) {
  ncclComm_t world = worldComm(dir);
  double v = rank + 1;
  CHECK(ncclAllReduce(&v, &v, 1, ncclFloat64, ncclSum, world, NULL)); /* all ranks alive */
  if (rank == 0) dieNow("dead");
  expectFailure(world);
  int dead = 0;
  ncclComm_t shrunk = NULL;
  CHECK(ncclCommShrink(world, &dead, 1, &shrunk, NULL, NCCL_SHRINK_ABORT));
  checkComm(shrunk, nranks - 1, rank - 1, rank + 1, sumOfRanks(1, nranks - 1), 13);
  CHECK(ncclCommDestroy(shrunk));
  CHECK(ncclCommAbort(world));
}

static ncclComm_t waitingComm;
static ncclResult_t waitingResult;
static char waitingError[1024];

static void* receiveForever(void* arg) {
  (void)arg;
  double v;
  waitingResult = ncclRecv(&v, 1, ncclFloat64, 1, waitingComm, NULL); /* rank 1 never sends */
  snprintf(waitingError, sizeof waitingError, "%s", ncclGetLastError(NULL));
  return NULL;
}

static void modeAbortShrink(const char* dir) {
  ncclComm_t world = waitingComm = worldComm(dir);
  int last = nranks - 1;
  pthread_t t;
  if (rank == 0) pthread_create(&t, NULL, receiveForever, NULL);
  if (rank != last) {
    ncclComm_t shrunk = NULL;
    CHECK(ncclCommShrink(world, &last, 1, &shrunk, NULL, NCCL_SHRINK_ABORT));
    checkComm(shrunk, nranks - 1, rank, rank + 1, sumOfRanks(0, nranks - 2), 23);
    CHECK(ncclCommDestroy(shrunk));
  }
  if (rank == 0) {
    pthread_join(t, NULL);
    if (waitingResult == ncclSuccess) FAIL("a receive nobody sends to succeeded");
    else if (!strstr(waitingError, "NCCL_SHRINK_ABORT"))
      FAIL("the waiting receive ended (%d) without naming the shrink: %s", waitingResult, waitingError);
    touch(dir, "rank0.done");
  }
  /* The other survivors' shrink ended after rank 0 poisoned the parent (it answers them after);
   * the excluded rank waits for rank 0, or its abort would poison the parent first. */
  if (rank == last) waitFor(dir, "rank0.done");
  CHECK(ncclCommAbort(world)); /* the parent was poisoned by the shrink: only abort is left */
}

static void modeShrinkFail(const char* dir) {
  ncclComm_t world = worldComm(dir);
  int last = nranks - 1;
  const int odd = nranks - 2;  /* the last survivor: the ones before it answer first */
  ncclComm_t shrunk = NULL;
  if (rank != last) {
    /* 1. it refuses its flags: everyone fails at once */
    ncclResult_t r = ncclCommShrink(world, &last, 1, &shrunk, NULL, rank == odd ? 7 : NCCL_SHRINK_DEFAULT);
    const char* e = ncclGetLastError(NULL);
    char want[64];
    snprintf(want, sizeof want, "rank %d refused its arguments: shrinkFlags is 7", odd);
    if (rank == odd && (r != ncclInvalidArgument || !strstr(e, "shrinkFlags is 7")))
      FAIL("the refusing rank got %d: %s", r, e);
    if (rank != odd && (r != ncclInvalidUsage || !strstr(e, want))) FAIL("beside a refusing rank got %d: %s", r, e);
    if (shrunk != NULL) FAIL("a refused shrink left a communicator");
    /* 2. it does not call: the new rank 0 waits out FORESTCC_TIMEOUT for its answer */
    if (rank == odd) {
      waitFor(dir, "first.failed"); /* its next shrink must not answer this one's offer in time */
    } else {
      r = ncclCommShrink(world, &last, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT);
      e = ncclGetLastError(NULL);
      if (rank == 0) {
        if (r != ncclTimeout && r != ncclRemoteError) FAIL("the new rank 0 got %d: %s", r, e);
        touch(dir, "first.failed");
      } else if (r != ncclRemoteError || !strstr(e, "could not finish the shrink")) {
        FAIL("a survivor that answered got %d: %s", r, e);
      }
      if (shrunk != NULL) FAIL("a failed shrink left a communicator");
    }
    /* 3. all of them: it works */
    CHECK(ncclCommShrink(world, &last, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
    checkComm(shrunk, nranks - 1, rank, rank + 1, sumOfRanks(0, nranks - 2), 29);
    CHECK(ncclCommDestroy(shrunk));
    if (rank == 0) touch(dir, "second.done");
  } else {
    waitFor(dir, "second.done"); /* its parent calls would time out meanwhile */
  }
  expectParentWorks(world, "the shrinks");
}

static void modeRevoke(const char* dir) {
  ncclComm_t world = worldComm(dir);
  const int last = nranks - 1;
  double v = rank + 1;
  CHECK(ncclAllReduce(&v, &v, 1, ncclFloat64, ncclSum, world, NULL));
  if (rank == last) dieNow("revoke");
  expectFailure(world);
  CHECK(ncclCommRevoke(world, NCCL_REVOKE_DEFAULT));
  if (pollToEnd(world, "the revoked communicator") != ncclSuccess)
    FAIL("ncclCommGetAsyncError of a revoked communicator is not ncclSuccess: %s", ncclGetLastError(world));
  EXPECT_ERROR(ncclAllReduce(&v, &v, 1, ncclFloat64, ncclSum, world, NULL), ncclInvalidUsage, "revoked");
  int excluded = last;
  ncclComm_t shrunk = NULL;
  CHECK(ncclCommShrink(world, &excluded, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
  checkComm(shrunk, nranks - 1, rank, rank + 1, sumOfRanks(0, nranks - 2), 17);
  CHECK(ncclCommDestroy(shrunk));
  CHECK(ncclCommDestroy(world));
}

static void modeMismatch(const char* dir) {
  ncclComm_t world = worldComm(dir);
  int last = nranks - 1;
  if (rank != last) {
    ncclComm_t shrunk = (ncclComm_t)0x1;
    /* rank 1 passes an empty list; the new rank 0 (rank 0) offers {last}: all of them refuse */
    ncclResult_t r = rank == 1 ? ncclCommShrink(world, NULL, 0, &shrunk, NULL, NCCL_SHRINK_DEFAULT)
                               : ncclCommShrink(world, &last, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT);
    const char* e = ncclGetLastError(NULL);
    char want[128];
    snprintf(want, sizeof want, "rank 1 excludes {}, rank 0 excludes {%d}", last);
    if (r != ncclInvalidUsage) FAIL("a shrink with different lists returned %d: %s", r, e);
    else if (!strstr(e, "different lists") || !strstr(e, want)) FAIL("the mismatch's message does not say '%s': %s", want, e);
    if (shrunk != NULL) FAIL("a refused shrink left a communicator");
  }
  expectParentWorks(world, "the refused shrink");
}

/* Inside a group on a non-blocking parent (a split of `world`), a shrink and a grow whose own
 * arguments are refused: ncclGroupEnd returns the refusal (not ncclInProgress) and the parent
 * stays usable. Then, on a 1-rank communicator of this rank's own, a grow inside a group whose
 * invitation ncclCommGetUniqueId replaces before ncclGroupEnd: refused there, never a grow that
 * waits for new ranks on an invitation nobody holds. */
static void refusalsInAGroup(ncclComm_t world) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t nb = NULL, out = NULL;
  ncclResult_t r = ncclCommSplit(world, 0, rank, &nb, &config);
  if (r != ncclSuccess && r != ncclInProgress) FAIL("the non-blocking split returned %d", r);
  if (pollToEnd(nb, "the non-blocking split") != ncclSuccess) FAIL("the non-blocking split failed");
  CHECK(ncclGroupStart());
  CHECK(ncclCommShrink(nb, NULL, 0, &out, NULL, 7)); /* refused at the group's end, on every rank */
  EXPECT_ERROR(ncclGroupEnd(), ncclInvalidArgument, "shrinkFlags is 7");
  if (out != NULL) FAIL("a refused shrink in a group left its output set");
  CHECK(ncclGroupStart());
  CHECK(ncclCommGrow(nb, nranks, NULL, -1, &out, NULL));
  EXPECT_ERROR(ncclGroupEnd(), ncclInvalidArgument, "expected more than");
  if (out != NULL) FAIL("a refused grow in a group left its output set");
  ncclResult_t state = ncclInProgress;
  CHECK(ncclCommGetAsyncError(nb, &state));
  if (state != ncclSuccess) FAIL("the parent of refused calls in a group is in state %d: %s", state, ncclGetLastError(nb));
  double v = rank + 1;
  r = ncclAllReduce(&v, &v, 1, ncclFloat64, ncclSum, nb, NULL);
  if (r != ncclSuccess && r != ncclInProgress) FAIL("the parent's all_reduce returned %d", r);
  if (pollToEnd(nb, "the parent's all_reduce") != ncclSuccess || v != sumOfRanks(0, nranks - 1))
    FAIL("the parent's all_reduce after the refusals gave %g", v);
  CHECK(ncclCommDestroy(nb));

  ncclUniqueId own, invitation, replaced;
  ncclComm_t alone = NULL;
  CHECK(ncclGetUniqueId(&own));
  CHECK(ncclCommInitRank(&alone, 1, own, 0));
  CHECK(ncclCommGetUniqueId(alone, &invitation));
  CHECK(ncclGroupStart());
  CHECK(ncclCommGrow(alone, 2, &invitation, -1, &out, NULL));
  CHECK(ncclCommGetUniqueId(alone, &replaced));
  EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "replaced by ncclCommGetUniqueId");
  if (out) CHECK(ncclCommDestroy(out));
  CHECK(ncclCommDestroy(alone));
}

static void modeErrors(const char* dir) {
  ncclComm_t world = worldComm(dir);
  ncclComm_t shrunk = (ncclComm_t)0x1;
  int list[2] = {nranks, 0};
  EXPECT_ERROR(ncclCommShrink(world, list, 1, NULL, NULL, 0), ncclInvalidArgument, "newcomm is NULL");
  EXPECT_ERROR(ncclCommShrink(world, list, -1, &shrunk, NULL, 0), ncclInvalidArgument, "excludeRanksCount is -1");
  EXPECT_ERROR(ncclCommShrink(world, NULL, 1, &shrunk, NULL, 0), ncclInvalidArgument, "excludeRanksList is NULL");
  char want[96];
  snprintf(want, sizeof want, "excludeRanksList[0] is %d: out of range (0..%d)", nranks, nranks - 1);
  EXPECT_ERROR(ncclCommShrink(world, list, 1, &shrunk, NULL, 0), ncclInvalidArgument, want);
  if (shrunk != NULL) FAIL("a refused shrink left its output set");
  list[0] = rank;
  EXPECT_ERROR(ncclCommShrink(world, list, 1, &shrunk, NULL, 0), ncclInvalidArgument, "the calling rank");
  EXPECT_ERROR(ncclCommShrink(world, NULL, 0, &shrunk, NULL, 2), ncclInvalidArgument, "shrinkFlags is 2");
  EXPECT_ERROR(ncclCommShrink(NULL, NULL, 0, &shrunk, NULL, 0), ncclInvalidArgument, "comm is NULL");
  EXPECT_ERROR(ncclCommRevoke(world, 3), ncclInvalidArgument, "revokeFlags is 3");
  EXPECT_ERROR(ncclCommRevoke(NULL, 0), ncclInvalidArgument, "comm is NULL");
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  EXPECT_ERROR(ncclCommGrow(world, nranks + 1, NULL, -1, NULL, NULL), ncclInvalidArgument, "newcomm is NULL");
  EXPECT_ERROR(ncclCommGrow(world, nranks + 1, NULL, rank, &shrunk, NULL), ncclInvalidArgument, "passes -1");
  EXPECT_ERROR(ncclCommGrow(world, nranks, NULL, -1, &shrunk, NULL), ncclInvalidArgument, "expected more than");
  EXPECT_ERROR(ncclCommGrow(world, nranks + 1, &id, -1, &shrunk, NULL), ncclInvalidArgument,
               "not the id this rank's ncclCommGetUniqueId made");
  EXPECT_ERROR(ncclCommGrow(NULL, nranks + 1, NULL, nranks, &shrunk, NULL), ncclInvalidArgument, "uniqueId is NULL");
  EXPECT_ERROR(ncclCommGrow(NULL, nranks + 1, &id, nranks + 1, &shrunk, NULL), ncclInvalidArgument, "out of range");
  EXPECT_ERROR(ncclCommGetUniqueId(world, NULL), ncclInvalidArgument, "uniqueId is NULL");
  /* an argument error on one rank is told to the others at the grow's all-gather: nobody waits */
  if (nranks > 1) {
    ncclResult_t r = ncclCommGrow(world, nranks + 1, NULL, rank == 0 ? 0 : -1, &shrunk, NULL);
    const char* e = ncclGetLastError(NULL);
    if (rank == 0 && (r != ncclInvalidArgument || !strstr(e, "passes -1")))
      FAIL("a grow with a bad rank returned %d: %s", r, e);
    if (rank != 0 && (r != ncclInvalidUsage || !strstr(e, "rank 0: rank is 0")))
      FAIL("a grow beside rank 0's bad rank returned %d: %s", r, e);
  }
  /* collective: every existing rank learns that nobody passed the id (no new rank is waiting) */
  EXPECT_ERROR(ncclCommGrow(world, nranks + 1, NULL, -1, &shrunk, NULL), ncclInvalidUsage,
               "no existing rank passed the id");
  if (shrunk != NULL) FAIL("a refused grow left its output set");
  refusalsInAGroup(world);
  expectParentWorks(world, "the refusals");
}

static void modeGrow(const char* dir) {
  const int old = nranks - 1, coordinator = old > 1 ? 1 : 0;
  ncclUniqueId id;
  ncclComm_t grown = NULL;
  if (rank < old) {
    ncclComm_t parent;
    shareId(dir, "parent.id", &id, rank == 0);
    CHECK(ncclCommInitRank(&parent, old, id, rank));
    if (rank == coordinator) {
      CHECK(ncclCommGetUniqueId(parent, &id));
      writeId(dir, "grow.id", &id);
    }
    CHECK(ncclCommGrow(parent, nranks, rank == coordinator ? &id : NULL, -1, &grown, NULL));
    CHECK(ncclCommDestroy(parent));
  } else {
    shareId(dir, "grow.id", &id, 0);
    /* refused by the coordinator, which then goes on waiting for the right ones */
    EXPECT_ERROR(ncclCommGrow(NULL, nranks, &id, 0, &grown, NULL), ncclInvalidUsage, "not a new one");
    EXPECT_ERROR(ncclCommGrow(NULL, nranks + 1, &id, rank, &grown, NULL), ncclInvalidUsage, "number of ranks");
    CHECK(ncclCommGrow(NULL, nranks, &id, rank, &grown, NULL));
  }
  checkComm(grown, nranks, rank, rank + 1, sumOfRanks(0, nranks - 1), 19);
  CHECK(ncclCommDestroy(grown));
}

int main(int argc, char** argv) {
  const char* mode = startProgram(argc, argv);
  if (!strcmp(mode, "shrink")) modeShrink(argv[2]);
  else if (!strcmp(mode, "dead") && nranks > 1) modeDead(argv[2]);
  else if (!strcmp(mode, "revoke") && nranks > 1) modeRevoke(argv[2]);
  else if (!strcmp(mode, "shrinkfail") && nranks > 2) modeShrinkFail(argv[2]);
  else if (!strcmp(mode, "abortshrink") && nranks > 2) modeAbortShrink(argv[2]);
  else if (!strcmp(mode, "mismatch") && nranks > 2) modeMismatch(argv[2]);
  else if (!strcmp(mode, "grow") && nranks > 1) modeGrow(argv[2]);
  else if (!strcmp(mode, "errors")) modeErrors(argv[2]);
  else {
    fprintf(stderr, "unknown mode %s (or too few ranks for it)\n", mode);
    return 2;
  }
  if (failures) return 1;
  printf("OK %s %d\n", mode, rank);
  return 0;
}
