/* NCCL's single-thread multi-rank init on forestcc's shim: ncclCommInitRank (and InitRankConfig)
 * for several ranks of one communicator from one thread inside ncclGroupStart/End, which joins
 * them all at ncclGroupEnd. Under forestcc-run, host buffers; prints "OK <mode> <rank>".
 *
 *   group_init_check blocking <dir>     each process makes ranks 2p and 2p+1 of a 2n-rank
 *                                       communicator in one group, then all_reduces on both
 *   group_init_check nonblocking <dir>  the same with config.blocking = 0: ncclGroupEnd returns
 *                                       ncclInProgress (or success) and each is polled
 *   group_init_check split <dir>        blocking, then both ranks split from this thread in one
 *                                       group, twice each (splitBoth)
 *   group_init_check splitnonblocking <dir>  nonblocking, then both split one after the other
 *                                       (in progress, and refused, until the other split), then
 *                                       both again in one group
 *   group_init_check shrink <dir>       blocking, then both ranks (but the last global rank, which
 *                                       is excluded) shrink from this thread in one group
 *   group_init_check shrinknonblocking <dir>  nonblocking, then the same one after the other
 *                                       (in progress until the other rank's shrink), then again
 *                                       in one group
 *   group_init_check grow <dir>         blocking, then this thread grows both its ranks and makes
 *                                       one new rank (global 2n + p) in one group
 *   group_init_check grownonblocking <dir>  nonblocking, the three grows one after the other
 */
#include <time.h>

#include "check_common.h"

static const char* mode;

static void waitReady(ncclComm_t comm) {
  const ncclResult_t state = pollToEnd(comm, "waitReady");
  if (state != ncclSuccess) FAIL("the communicator ended in %d: %s", state, ncclGetLastError(comm));
}

/* The call's result, as the mode's config allows: ncclSuccess, or also ncclInProgress when
 * non-blocking. */
static void expectStarted(ncclResult_t r, int blocking, const char* what) {
  if (r != ncclSuccess && !(r == ncclInProgress && !blocking))
    FAIL("%s returned %d: %s", what, r, ncclGetLastError(NULL));
}

/* One all_reduce of each communicator's members' `mine` in one group: each must give `want`. */
static void allReduceEach(ncclComm_t* comms, const double* mine, const double* want, int count, int blocking) {
  double x[3];
  CHECK(ncclGroupStart());
  for (int i = 0; i < count; ++i) {
    x[i] = mine[i];
    CHECK(ncclAllReduce(&x[i], &x[i], 1, ncclFloat64, ncclSum, comms[i], NULL));
  }
  expectStarted(ncclGroupEnd(), blocking, "the all_reduce group");
  for (int i = 0; i < count; ++i) {
    if (!blocking) waitReady(comms[i]);
    if (x[i] != want[i]) FAIL("all_reduce %d gave %g, want %g", i, x[i], want[i]);
  }
}

/* Whether the communicator is rank `want` of `size`. */
static void expectPlace(ncclComm_t comm, int want, int size, const char* what) {
  int count = -1, me = -1;
  CHECK(ncclCommCount(comm, &count));
  CHECK(ncclCommUserRank(comm, &me));
  if (count != size || me != want) FAIL("%s: rank %d of %d, want %d of %d", what, me, count, want, size);
}

/* Both ranks of this thread split their communicator, from this one thread: inside a group
 * (blocking parents), or one after the other outside any (non-blocking parents: each split
 * returns before the other rank's is called). Global rank g takes color g % 2, except that
 * g % 3 == 2 takes NCCL_SPLIT_NOCOLOR, and key -g (new ranks in reverse order); then each new
 * communicator all_reduces its members' global ranks. */
static void splitBoth(ncclComm_t* comms, int total, int blocking) {
  ncclComm_t subs[2] = {NULL, NULL};
  int colors[2];
  for (int i = 0; i < 2; ++i) {
    const int g = 2 * rank + i;
    colors[i] = g % 3 == 2 ? NCCL_SPLIT_NOCOLOR : g % 2;
  }
  ncclComm_t dups[2] = {NULL, NULL};
  if (blocking) {
    /* two splits of each parent in one group: the second (one color, key g) duplicates it */
    CHECK(ncclGroupStart());
    for (int i = 0; i < 2; ++i) {
      CHECK(ncclCommSplit(comms[i], colors[i], -(2 * rank + i), &subs[i], NULL));
      CHECK(ncclCommSplit(comms[i], 0, 2 * rank + i, &dups[i], NULL));
    }
    CHECK(ncclGroupEnd());
  } else {
    for (int i = 0; i < 2; ++i) {
      const ncclResult_t r = ncclCommSplit(comms[i], colors[i], -(2 * rank + i), &subs[i], NULL);
      if (r != ncclSuccess && r != ncclInProgress) FAIL("split %d returned %d: %s", i, r, ncclGetLastError(comms[i]));
      if (i == 0 && total > 1) {
        /* this thread's other rank has not split yet, so the agreement cannot be done: both
         * communicators say so, and the new one cannot be used yet */
        ncclResult_t state = ncclSuccess;
        CHECK(ncclCommGetAsyncError(comms[0], &state));
        if (state != ncclInProgress) FAIL("the parent says %d during its split, want ncclInProgress", state);
        if (subs[0]) {
          int count = -1;
          EXPECT_ERROR(ncclCommCount(subs[0], &count), ncclInvalidArgument, "still being made");
          CHECK(ncclCommGetAsyncError(subs[0], &state));
          if (state != ncclInProgress) FAIL("the new communicator says %d before its split agreed", state);
        }
      }
    }
    for (int i = 0; i < 2; ++i) {
      waitReady(comms[i]);
      if (subs[i]) waitReady(subs[i]);
    }
    /* non-blocking splits inside a group: ncclGroupEnd returns ncclInProgress or success */
    CHECK(ncclGroupStart());
    for (int i = 0; i < 2; ++i) CHECK(ncclCommSplit(comms[i], 0, 2 * rank + i, &dups[i], NULL));
    const ncclResult_t r = ncclGroupEnd();
    if (r != ncclSuccess && r != ncclInProgress) FAIL("the group of splits returned %d: %s", r, ncclGetLastError(NULL));
    for (int i = 0; i < 2; ++i) waitReady(dups[i]);
  }
  for (int i = 0; i < 2; ++i) {
    int count = -1, me = -1;
    CHECK(ncclCommCount(dups[i], &count));
    CHECK(ncclCommUserRank(dups[i], &me));
    if (count != total || me != 2 * rank + i) FAIL("duplicate of rank %d: count %d rank %d", 2 * rank + i, count, me);
    CHECK(ncclCommDestroy(dups[i]));
  }
  double x[2] = {0, 0};
  CHECK(ncclGroupStart());
  for (int i = 0; i < 2; ++i) {
    const int g = 2 * rank + i;
    if (colors[i] == NCCL_SPLIT_NOCOLOR) {
      if (subs[i]) FAIL("rank %d passed NCCL_SPLIT_NOCOLOR but got a communicator", g);
      continue;
    }
    int members = 0, below = 0;
    for (int h = 0; h < total; ++h)
      if (h % 3 != 2 && h % 2 == colors[i]) {
        ++members;
        below += h > g;  /* key -h: the larger global ranks come first */
      }
    int count = -1, me = -1;
    CHECK(ncclCommCount(subs[i], &count));
    CHECK(ncclCommUserRank(subs[i], &me));
    if (count != members || me != below) FAIL("split of rank %d: count %d rank %d, want %d and %d", g, count, me, members, below);
    x[i] = g;
    CHECK(ncclAllReduce(&x[i], &x[i], 1, ncclFloat64, ncclSum, subs[i], NULL));
  }
  const ncclResult_t r = ncclGroupEnd();
  if (r != ncclSuccess && !(r == ncclInProgress && !blocking)) FAIL("all_reduce group on the splits returned %d", r);
  for (int i = 0; i < 2; ++i) {
    if (!subs[i]) continue;
    if (!blocking) waitReady(subs[i]);
    int sum = 0;
    for (int h = 0; h < total; ++h)
      if (h % 3 != 2 && h % 2 == colors[i]) sum += h;
    if (x[i] != sum) FAIL("split of rank %d: all_reduce gave %g, want %d", 2 * rank + i, x[i], sum);
    CHECK(ncclCommDestroy(subs[i]));
  }
}

/* Both ranks of this thread shrink their communicator, excluding the last global rank (which does
 * not call), from this one thread: in one group (blocking), or one after the other outside any
 * (non-blocking: each returns before the other rank's is called), then again in one group. The
 * survivors keep their numbers; then each new communicator all_reduces its members' ranks. */
static void shrinkBoth(ncclComm_t* comms, int total, int blocking) {
  int excluded = total - 1;
  ncclComm_t shrunk[2] = {NULL, NULL};
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking;
  const int mine = 2 * rank == excluded ? 0 : (2 * rank + 1 == excluded ? 1 : 2);  /* survivors here */
  if (blocking) {
    CHECK(ncclGroupStart());
    for (int i = 0; i < mine; ++i) CHECK(ncclCommShrink(comms[i], &excluded, 1, &shrunk[i], &config, NCCL_SHRINK_DEFAULT));
    CHECK(ncclGroupEnd());
  } else {
    for (int i = 0; i < mine; ++i) {
      expectStarted(ncclCommShrink(comms[i], &excluded, 1, &shrunk[i], &config, NCCL_SHRINK_DEFAULT), 0, "shrink");
      if (i == 0 && mine == 2) {
        /* this thread's other survivor has not shrunk yet: the agreement cannot be done */
        ncclResult_t state = ncclSuccess;
        CHECK(ncclCommGetAsyncError(comms[0], &state));
        if (state != ncclInProgress) FAIL("the parent says %d during its shrink, want ncclInProgress", state);
        CHECK(ncclCommGetAsyncError(shrunk[0], &state));
        if (state != ncclInProgress) FAIL("the new communicator says %d before its shrink agreed", state);
        int count = -1;
        EXPECT_ERROR(ncclCommCount(shrunk[0], &count), ncclInvalidArgument, "still being made");
      }
    }
    for (int i = 0; i < mine; ++i) {
      waitReady(comms[i]);
      waitReady(shrunk[i]);
      expectPlace(shrunk[i], 2 * rank + i, total - 1, "shrunk");
      CHECK(ncclCommDestroy(shrunk[i]));
      shrunk[i] = NULL;
    }
    /* non-blocking shrinks inside a group: ncclGroupEnd returns ncclInProgress or success */
    CHECK(ncclGroupStart());
    for (int i = 0; i < mine; ++i) CHECK(ncclCommShrink(comms[i], &excluded, 1, &shrunk[i], &config, NCCL_SHRINK_DEFAULT));
    expectStarted(ncclGroupEnd(), 0, "the group of shrinks");
    for (int i = 0; i < mine; ++i) waitReady(shrunk[i]);
  }
  double x[2], want[2];
  for (int i = 0; i < mine; ++i) {
    expectPlace(shrunk[i], 2 * rank + i, total - 1, "shrunk");
    x[i] = 2 * rank + i;
    want[i] = (double)(total - 1) * (total - 2) / 2;
  }
  allReduceEach(shrunk, x, want, mine, blocking);
  for (int i = 0; i < mine; ++i) CHECK(ncclCommDestroy(shrunk[i]));
}

/* This thread grows both its ranks and makes one new rank, 2n + p, of a 3n-rank communicator
 * (global rank 1, not the bootstrap root, coordinates): in one group (blocking), or one after the
 * other outside any (non-blocking: each returns before the others are called); then the three
 * all_reduce their global ranks. */
static void growBoth(const char* dir, ncclComm_t* comms, int total, int blocking) {
  const int grown = 3 * nranks;
  ncclUniqueId id;
  if (rank == 0) {
    CHECK(ncclCommGetUniqueId(comms[1], &id));
    writeId(dir, "grow.id", &id);
  } else {
    shareId(dir, "grow.id", &id, 0);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking;
  ncclComm_t out[3] = {NULL, NULL, NULL};
  if (blocking) CHECK(ncclGroupStart());
  for (int i = 0; i < 2; ++i) {
    const int g = 2 * rank + i;
    expectStarted(ncclCommGrow(comms[i], grown, g == 1 ? &id : NULL, -1, &out[i], &config), blocking, "grow");
    if (!blocking && i == 0) {
      /* the other existing rank and the new ones have not called: the agreement cannot be done */
      ncclResult_t state = ncclSuccess;
      CHECK(ncclCommGetAsyncError(out[0], &state));
      if (state != ncclInProgress) FAIL("the grown communicator says %d before the others grew", state);
    }
  }
  expectStarted(ncclCommGrow(NULL, grown, &id, total + rank, &out[2], &config), blocking, "the new rank's grow");
  if (blocking) CHECK(ncclGroupEnd());
  double x[3], want[3];
  for (int i = 0; i < 3; ++i) {
    if (!blocking) waitReady(out[i]);
    const int g = i < 2 ? 2 * rank + i : total + rank;
    expectPlace(out[i], g, grown, "grown");
    x[i] = g;
    want[i] = (double)grown * (grown - 1) / 2;
  }
  allReduceEach(out, x, want, 3, blocking);
  for (int i = 0; i < 3; ++i) CHECK(ncclCommDestroy(out[i]));
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
  if (!strncmp(mode, "split", 5)) splitBoth(comms, total, blocking);
  if (!strncmp(mode, "shrink", 6)) shrinkBoth(comms, total, blocking);
  if (!strncmp(mode, "grow", 4)) growBoth(dir, comms, total, blocking);
  for (int i = 0; i < 2; ++i) CHECK(ncclCommDestroy(comms[i]));
}

int main(int argc, char** argv) {
  mode = startProgram(argc, argv);
  static const char* modes[] = {"blocking", "nonblocking", "split", "splitnonblocking", "shrink",
                                "shrinknonblocking", "grow", "grownonblocking"};
  int known = 0;
  for (size_t i = 0; i < sizeof modes / sizeof *modes; ++i) known |= !strcmp(mode, modes[i]);
  if (known) run(argv[2], !strstr(mode, "nonblocking"));
  else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  if (failures) return 1;
  printf("OK %s %d\n", mode, rank);
  return 0;
}
