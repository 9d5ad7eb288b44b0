/* What the C programs of tests/nccl/ share: the rank and size forestcc-run gives, failure
 * reporting (FAIL counts, CHECK exits, EXPECT_ERROR checks the result and ncclGetLastError's text),
 * the ncclUniqueId broadcast through a directory every rank sees, and marker files there. Each
 * program includes it once (static definitions). */
#ifndef FORESTCC_NCCL_CHECK_COMMON_H
#define FORESTCC_NCCL_CHECK_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

static int rank, nranks;
static int failures;

/* Every program's start: argv is MODE DIR (exit 2 otherwise); the rank and size come from
 * forestcc-run's environment. Returns MODE. */
static const char* startProgram(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODE DIR (under forestcc-run)\n", argv[0]);
    exit(2);
  }
  rank = atoi(getenv("FORESTCC_RANK") ? getenv("FORESTCC_RANK") : "0");
  nranks = atoi(getenv("FORESTCC_SIZE") ? getenv("FORESTCC_SIZE") : "1");
  return argv[1];
}

#define FAIL(...)                                   \
  do {                                              \
    fprintf(stderr, "ERROR rank %d: ", rank);       \
    fprintf(stderr, __VA_ARGS__);                   \
    fprintf(stderr, "\n");                          \
    if (++failures > 20) exit(1);                   \
  } while (0)

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    ncclResult_t r_ = (call);                                                                            \
    if (r_ != ncclSuccess) {                                                                             \
      fprintf(stderr, "ERROR rank %d: %s returned %d (%s): %s\n", rank, #call, r_, ncclGetErrorString(r_), \
              ncclGetLastError(NULL));                                                                   \
      exit(1);                                                                                           \
    }                                                                                                    \
  } while (0)

/* The call must return `want` and ncclGetLastError must contain `text`. */
#define EXPECT_ERROR(call, want, text)                                                                  \
  do {                                                                                                  \
    ncclResult_t r_ = (call);                                                                           \
    const char* e_ = ncclGetLastError(NULL);                                                            \
    if (r_ != (want))                                                                                   \
      FAIL("%s returned %d (%s), expected %d; last error: %s", #call, r_, ncclGetErrorString(r_), want, e_); \
    else if (!strstr(e_, text))                                                                         \
      FAIL("%s: last error '%s' does not say '%s'", #call, e_, text);                                   \
  } while (0)

static inline double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Polls a non-blocking communicator until its state is not ncclInProgress (at most two minutes)
 * and returns it. */
static inline ncclResult_t pollToEnd(ncclComm_t comm, const char* what) {
  const double deadline = now() + 120;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    CHECK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclInProgress && now() > deadline) {
      FAIL("%s: still in progress after 120 s", what);
      exit(1);
    }
    if (state == ncclInProgress) usleep(100);
  }
  return state;
}

/* ---- the id broadcast through a shared directory ------------------------------------------------ */

/* Writes `id` where shareId's readers look for `name` (atomically: they never read half of it). */
static inline void writeId(const char* dir, const char* name, const ncclUniqueId* id) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "wb");
  if (!f || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
    fprintf(stderr, "ERROR rank %d: cannot write %s: %s\n", rank, path, strerror(errno));
    exit(1);
  }
}

static void shareId(const char* dir, const char* name, ncclUniqueId* id, int creator) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (creator) {
    CHECK(ncclGetUniqueId(id));
    writeId(dir, name, id);
    return;
  }
  for (int tries = 0; tries < 600000; ++tries) { /* up to ~10 min; forestcc-run kills us sooner */
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t got = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (got == 1) return;
    }
    usleep(1000);
  }
  fprintf(stderr, "ERROR rank %d: no id at %s\n", rank, path);
  exit(1);
}

static inline ncclComm_t worldComm(const char* dir) {
  ncclUniqueId id;
  ncclComm_t comm;
  shareId(dir, "world.id", &id, rank == 0);
  CHECK(ncclCommInitRank(&comm, nranks, id, rank));
  return comm;
}

static inline void touch(const char* dir, const char* name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "w");
  if (f) fclose(f);
}

static inline void waitFor(const char* dir, const char* name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  while (access(path, F_OK) != 0) usleep(1000);
}

#endif
