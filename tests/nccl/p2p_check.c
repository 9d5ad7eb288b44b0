/* Groups of ncclSend/ncclRecv on forestcc's shim (one point-to-point batch per group, see
 * docs/nccl-shim.md "Groups"), on host buffers under forestcc-run. Each mode prints
 * "OK <mode> <rank>" at the end; a wrong value or result prints "ERROR ..." and exits non-zero.
 *
 *   p2p_check alltoallv <dir>   all-to-all with random splits (zeros included, self included) as
 *                               one group of sends and receives, as torch's all_to_all_single
 *   p2p_check ring <dir>        a ring shift both ways, several messages per peer (FIFO), zero sizes
 *   p2p_check self <dir>        sends to this rank itself beside sends to peers
 *   p2p_check mismatch <dir>    sizes that differ (3+ ranks; a group of one message each, then of
 *                               two): ncclInvalidUsage on both ranks of the pair, the rest of the
 *                               group delivered, the pair still usable after; sends to oneself
 *                               without their receives (any size)
 *   p2p_check split <dir>       (2+ ranks) messages match in order whatever the groups, as NCCL
 *                               matches them: rank 0's one group of three sends received by the
 *                               last rank in three groups, three single sends received in one
 *                               group, and groups that overlap (two sends, then a receive and a
 *                               send back), each checked
 *   p2p_check splitmismatch <dir> (2+ ranks) a size mismatch in the second part of a group received
 *                               in two: both ranks get the error, and since the pair can no longer
 *                               match, the communicator is poisoned (every rank's next call fails)
 *   p2p_check refused <dir>     (2+ ranks) rank 1's send or receive refused for its arguments (a
 *                               NULL buffer) alone and in a group: its place is still taken, so
 *                               rank 0's matching call fails naming the refusal rather than matching
 *                               rank 1's next message; the pair stays in step (a later exchange and
 *                               an all_reduce of every rank deliver the right data)
 *   p2p_check unmatched <dir>   a send whose peer posts no receive (run with a short
 *                               FORESTCC_TIMEOUT): the sender's wait ends in a timeout error, and
 *                               every rank's next call fails (the communicator is poisoned), never
 *                               a hang
 */
#include <stdint.h>

#include "check_common.h"

/* A deterministic generator every rank runs with the same seed, so all agree on the splits. */
static uint64_t nextRandom(uint64_t* state) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return *state >> 33;
}

static double valueOf(int from, int to, size_t i, int round) { return from * 1e6 + to * 1e4 + (double)i + round * 0.5; }

/* ---- all-to-all with random splits ------------------------------------------------------------- */

static void alltoallvRound(ncclComm_t comm, int round, size_t maxCount) {
  uint64_t seed = 1000 + (uint64_t)round;
  size_t* counts = calloc((size_t)nranks * nranks, sizeof(size_t)); /* counts[from * n + to] */
  for (int f = 0; f < nranks; ++f)
    for (int t = 0; t < nranks; ++t) {
      uint64_t r = nextRandom(&seed);
      counts[f * nranks + t] = r % 3 == 0 ? 0 : (size_t)(nextRandom(&seed) % (maxCount + 1));
    }
  size_t sendTotal = 0, recvTotal = 0;
  for (int p = 0; p < nranks; ++p) {
    sendTotal += counts[rank * nranks + p];
    recvTotal += counts[p * nranks + rank];
  }
  double* sendBuf = malloc((sendTotal + 1) * sizeof(double));
  double* recvBuf = malloc((recvTotal + 1) * sizeof(double));
  size_t off = 0;
  for (int p = 0; p < nranks; ++p)
    for (size_t i = 0; i < counts[rank * nranks + p]; ++i) sendBuf[off++] = valueOf(rank, p, i, round);
  for (size_t i = 0; i < recvTotal; ++i) recvBuf[i] = -1;

  /* torch's order: every send, then every receive, in one group */
  CHECK(ncclGroupStart());
  off = 0;
  for (int p = 0; p < nranks; ++p) {
    CHECK(ncclSend(sendBuf + off, counts[rank * nranks + p], ncclFloat64, p, comm, NULL));
    off += counts[rank * nranks + p];
  }
  off = 0;
  for (int p = 0; p < nranks; ++p) {
    CHECK(ncclRecv(recvBuf + off, counts[p * nranks + rank], ncclFloat64, p, comm, NULL));
    off += counts[p * nranks + rank];
  }
  CHECK(ncclGroupEnd());

  off = 0;
  for (int p = 0; p < nranks; ++p)
    for (size_t i = 0; i < counts[p * nranks + rank]; ++i, ++off)
      if (recvBuf[off] != valueOf(p, rank, i, round))
        FAIL("alltoallv round %d: from %d element %zu is %.1f, expected %.1f", round, p, i, recvBuf[off],
             valueOf(p, rank, i, round));
  free(sendBuf);
  free(recvBuf);
  free(counts);
}

static void modeAlltoallv(ncclComm_t comm) {
  for (int round = 0; round < 6; ++round) alltoallvRound(comm, round, 40);
  alltoallvRound(comm, 6, 300000); /* megabytes per peer: larger than any copy chunk */
}

/* ---- ring shifts ------------------------------------------------------------------------------- */

static void modeRing(ncclComm_t comm) {
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  enum { kMessages = 4 };
  const size_t sizes[kMessages] = {7, 0, 1000, 3}; /* int32 elements of the k-th message each way */
  int32_t* toNext[kMessages];
  int32_t* toPrev[kMessages];
  int32_t* fromPrev[kMessages];
  int32_t* fromNext[kMessages];
  for (int k = 0; k < kMessages; ++k) {
    toNext[k] = malloc((sizes[k] + 1) * 4);
    toPrev[k] = malloc((sizes[k] + 1) * 4);
    fromPrev[k] = calloc(sizes[k] + 1, 4);
    fromNext[k] = calloc(sizes[k] + 1, 4);
    for (size_t i = 0; i < sizes[k]; ++i) {
      toNext[k][i] = rank * 100000 + k * 10000 + (int32_t)i;
      toPrev[k][i] = -(rank * 100000 + k * 10000 + (int32_t)i);
    }
  }
  /* receives posted before the sends, interleaved across the two directions: the order inside a
   * group does not matter, only the order of messages between one pair of ranks */
  CHECK(ncclGroupStart());
  for (int k = 0; k < kMessages; ++k) {
    CHECK(ncclRecv(fromPrev[k], sizes[k], ncclInt32, prev, comm, NULL));
    CHECK(ncclRecv(fromNext[k], sizes[k], ncclInt32, next, comm, NULL));
  }
  for (int k = 0; k < kMessages; ++k) {
    CHECK(ncclSend(toNext[k], sizes[k], ncclInt32, next, comm, NULL));
    CHECK(ncclSend(toPrev[k], sizes[k], ncclInt32, prev, comm, NULL));
  }
  CHECK(ncclGroupEnd());
  for (int k = 0; k < kMessages; ++k)
    for (size_t i = 0; i < sizes[k]; ++i) {
      if (fromPrev[k][i] != prev * 100000 + k * 10000 + (int32_t)i)
        FAIL("ring: message %d from %d element %zu is %d", k, prev, i, fromPrev[k][i]);
      if (fromNext[k][i] != -(next * 100000 + k * 10000 + (int32_t)i))
        FAIL("ring: message %d from %d element %zu is %d", k, next, i, fromNext[k][i]);
    }
  for (int k = 0; k < kMessages; ++k) {
    free(toNext[k]);
    free(toPrev[k]);
    free(fromPrev[k]);
    free(fromNext[k]);
  }
  /* many groups in a row: each pair's posts stay in step */
  for (int round = 0; round < 200; ++round) {
    int32_t out = rank * 1000 + round, in = -1;
    CHECK(ncclGroupStart());
    CHECK(ncclSend(&out, 1, ncclInt32, next, comm, NULL));
    CHECK(ncclRecv(&in, 1, ncclInt32, prev, comm, NULL));
    CHECK(ncclGroupEnd());
    if (in != prev * 1000 + round) FAIL("ring round %d: got %d", round, in);
  }
}

/* ---- messages to oneself ---------------------------------------------------------------------- */

static void modeSelf(ncclComm_t comm) {
  float a[5] = {1, 2, 3, 4, 5}, b[2] = {6, 7}, gotA[5] = {0}, gotB[2] = {0}, peerOut = (float)rank, peerIn = -1;
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  CHECK(ncclGroupStart());
  CHECK(ncclRecv(gotA, 5, ncclFloat32, rank, comm, NULL));
  if (nranks > 1) CHECK(ncclSend(&peerOut, 1, ncclFloat32, next, comm, NULL));
  CHECK(ncclSend(a, 5, ncclFloat32, rank, comm, NULL));
  if (nranks > 1) CHECK(ncclRecv(&peerIn, 1, ncclFloat32, prev, comm, NULL));
  CHECK(ncclSend(b, 2, ncclFloat32, rank, comm, NULL));
  CHECK(ncclRecv(gotB, 2, ncclFloat32, rank, comm, NULL));
  CHECK(ncclGroupEnd());
  for (int i = 0; i < 5; ++i)
    if (gotA[i] != a[i]) FAIL("self: first message element %d is %g", i, gotA[i]);
  for (int i = 0; i < 2; ++i)
    if (gotB[i] != b[i]) FAIL("self: second message element %d is %g", i, gotB[i]);
  if (nranks > 1 && peerIn != (float)prev) FAIL("self: the message from rank %d is %g", prev, peerIn);
  /* a lone send to oneself has no receive to meet: refused, not a hang */
  EXPECT_ERROR(ncclSend(a, 5, ncclFloat32, rank, comm, NULL), ncclInvalidUsage,
               "sends 20 bytes to this rank itself and receives nothing from it");
}

/* ---- mismatches ------------------------------------------------------------------------------- */

/* A ring shift every rank takes part in beside the faulty pair: it must still be delivered. */
static void expectRingDelivered(const char* what, int32_t in, int round) {
  const int prev = (rank + nranks - 1) % nranks;
  if (in != prev * 100 + round) FAIL("%s: the ring message beside the mismatch is %d", what, in);
}

/* ---- messages split across groups ---------------------------------------------------------------- */

static void expectInts(const char* what, const int32_t* got, int count, int base) {
  for (int i = 0; i < count; ++i)
    if (got[i] != base + i) {
      FAIL("%s: element %d is %d, expected %d", what, i, got[i], base + i);
      return;
    }
}

static void fillInts(int32_t* v, int count, int base) {
  for (int i = 0; i < count; ++i) v[i] = base + i;
}

static void modeSplit(ncclComm_t comm) {
  const int last = nranks - 1;
  int32_t a[8], b[8], c[8], got[3][8];
  fillInts(a, 3, 100), fillInts(b, 1, 200), fillInts(c, 5, 300);
  memset(got, 0xff, sizeof got);
  /* 1. one group of three sends (one empty), received in three groups */
  if (rank == 0) {
    CHECK(ncclGroupStart());
    CHECK(ncclSend(a, 3, ncclInt32, last, comm, NULL));
    CHECK(ncclSend(b, 0, ncclInt32, last, comm, NULL));
    CHECK(ncclSend(c, 5, ncclInt32, last, comm, NULL));
    CHECK(ncclGroupEnd());
  } else if (rank == last) {
    CHECK(ncclRecv(got[0], 3, ncclInt32, 0, comm, NULL));
    CHECK(ncclRecv(got[1], 0, ncclInt32, 0, comm, NULL));
    CHECK(ncclRecv(got[2], 5, ncclInt32, 0, comm, NULL));
    expectInts("three sends in one group, received in three", got[0], 3, 100);
    expectInts("three sends in one group, received in three", got[2], 5, 300);
  }
  /* 2. three single sends, received in one group */
  memset(got, 0xff, sizeof got);
  if (rank == 0) {
    CHECK(ncclSend(c, 5, ncclInt32, last, comm, NULL));
    CHECK(ncclSend(a, 3, ncclInt32, last, comm, NULL));
    CHECK(ncclSend(b, 1, ncclInt32, last, comm, NULL));
  } else if (rank == last) {
    CHECK(ncclGroupStart());
    CHECK(ncclRecv(got[0], 5, ncclInt32, 0, comm, NULL));
    CHECK(ncclRecv(got[1], 3, ncclInt32, 0, comm, NULL));
    CHECK(ncclRecv(got[2], 1, ncclInt32, 0, comm, NULL));
    CHECK(ncclGroupEnd());
    expectInts("three single sends, received in one group", got[0], 5, 300);
    expectInts("three single sends, received in one group", got[1], 3, 100);
    expectInts("three single sends, received in one group", got[2], 1, 200);
  }
  /* 3. overlapping groups: rank 0 sends two and then receives one; the last rank receives the
   * first, then receives the second and sends back in one group */
  memset(got, 0xff, sizeof got);
  if (rank == 0) {
    CHECK(ncclGroupStart());
    CHECK(ncclSend(a, 3, ncclInt32, last, comm, NULL));
    CHECK(ncclSend(c, 5, ncclInt32, last, comm, NULL));
    CHECK(ncclGroupEnd());
    CHECK(ncclRecv(got[0], 1, ncclInt32, last, comm, NULL));
    expectInts("the answer after overlapping groups", got[0], 1, 200);
  } else if (rank == last) {
    CHECK(ncclRecv(got[0], 3, ncclInt32, 0, comm, NULL));
    CHECK(ncclGroupStart());
    CHECK(ncclRecv(got[1], 5, ncclInt32, 0, comm, NULL));
    CHECK(ncclSend(b, 1, ncclInt32, 0, comm, NULL));
    CHECK(ncclGroupEnd());
    expectInts("overlapping groups", got[0], 3, 100);
    expectInts("overlapping groups", got[1], 5, 300);
  }
}

static void modeSplitMismatch(ncclComm_t comm) {
  const int last = nranks - 1;
  int32_t a[8] = {0}, got[8];
  if (rank == 0) {
    CHECK(ncclGroupStart());
    CHECK(ncclSend(a, 4, ncclInt32, last, comm, NULL));
    CHECK(ncclSend(a, 5, ncclInt32, last, comm, NULL));
    EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "message 1 has 20 bytes but the matching recv expected 24");
  } else if (rank == last) {
    CHECK(ncclRecv(got, 4, ncclInt32, 0, comm, NULL));
    EXPECT_ERROR(ncclRecv(got, 6, ncclInt32, 0, comm, NULL), ncclInvalidUsage, "it sent 20 bytes");
  }
  /* the pair could no longer tell which message is which: every rank's next call fails */
  ncclResult_t r = ncclAllReduce(a, a, 1, ncclInt32, ncclSum, comm, NULL);
  if (r == ncclSuccess) FAIL("an all_reduce after a mismatch across groups succeeded");
  else if (!strstr(ncclGetLastError(comm), "can no longer match"))
    FAIL("the call after a mismatch across groups failed (%d) without saying why: %s", r, ncclGetLastError(comm));
}

static void modeMismatch(ncclComm_t comm) {
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  int32_t buf[16] = {0}, out[16] = {0}, ringOut, ringIn;

  /* 1. a size mismatch: rank 0 sends 10 elements to the last rank, which expects 12 (with 3 or more
   * ranks that pair exchanges nothing else in the group) */
  const int last = nranks - 1;
  if (nranks >= 3) {
  ringOut = rank * 100 + 1, ringIn = -1;
  CHECK(ncclGroupStart());
  CHECK(ncclSend(&ringOut, 1, ncclInt32, next, comm, NULL));
  CHECK(ncclRecv(&ringIn, 1, ncclInt32, prev, comm, NULL));
  if (rank == 0) CHECK(ncclSend(out, 10, ncclInt32, last, comm, NULL));
  if (rank == last) CHECK(ncclRecv(buf, 12, ncclInt32, 0, comm, NULL));
  ncclResult_t r = ncclGroupEnd();
  if (rank == 0) {
    if (r != ncclInvalidUsage) FAIL("size mismatch: the sender got %d", r);
    else if (!strstr(ncclGetLastError(comm), "the matching recv expected 48 bytes"))
      FAIL("size mismatch: the sender's error says: %s", ncclGetLastError(comm));
  } else if (rank == last) {
    if (r != ncclInvalidUsage) FAIL("size mismatch: the receiver got %d", r);
    else if (!strstr(ncclGetLastError(comm), "it sent 40 bytes"))
      FAIL("size mismatch: the receiver's error says: %s", ncclGetLastError(comm));
  } else if (r != ncclSuccess) {
    FAIL("size mismatch: rank %d, not in the pair, got %d: %s", rank, r, ncclGetLastError(comm));
  }
  expectRingDelivered("size mismatch", ringIn, 1);

  /* 2. two messages in one group of rank 0, of sizes 16 and 20 bytes; the last rank's group
   * takes one, the second of 20 bytes where 24 are expected: both ranks get the size error */
  ringOut = rank * 100 + 2, ringIn = -1;
  CHECK(ncclGroupStart());
  CHECK(ncclSend(&ringOut, 1, ncclInt32, next, comm, NULL));
  CHECK(ncclRecv(&ringIn, 1, ncclInt32, prev, comm, NULL));
  if (rank == 0) {
    CHECK(ncclSend(out, 4, ncclInt32, last, comm, NULL));
    CHECK(ncclSend(out, 5, ncclInt32, last, comm, NULL));
  }
  if (rank == last) {
    CHECK(ncclRecv(buf, 4, ncclInt32, 0, comm, NULL));
    CHECK(ncclRecv(buf + 4, 6, ncclInt32, 0, comm, NULL)); /* a batch's receive buffers never overlap */
  }
  r = ncclGroupEnd();
  if (rank == 0) {
    if (r != ncclInvalidUsage) FAIL("second size mismatch: the sender got %d", r);
    else if (!strstr(ncclGetLastError(comm), "message 1 has 20 bytes but the matching recv expected 24"))
      FAIL("second size mismatch: the sender's error says: %s", ncclGetLastError(comm));
  } else if (rank == last) {
    if (r != ncclInvalidUsage) FAIL("second size mismatch: the receiver got %d", r);
    else if (!strstr(ncclGetLastError(comm), "message 1 expects 24 bytes, it sent 20"))
      FAIL("second size mismatch: the receiver's error says: %s", ncclGetLastError(comm));
  } else if (r != ncclSuccess) {
    FAIL("second size mismatch: rank %d, not in the pair, got %d: %s", rank, r, ncclGetLastError(comm));
  }
  expectRingDelivered("second size mismatch", ringIn, 2);
  }

  /* 3. sends to oneself without as many receives: refused on this rank before any peer hears of
   * the group (the ring beside it is not sent either, so every rank does it) */
  CHECK(ncclGroupStart());
  if (nranks > 1) {
    CHECK(ncclSend(&ringOut, 1, ncclInt32, next, comm, NULL));
    CHECK(ncclRecv(&ringIn, 1, ncclInt32, prev, comm, NULL));
  }
  CHECK(ncclSend(out, 3, ncclInt32, rank, comm, NULL));
  EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "12 bytes to this rank itself and receives nothing from it");

  /* 4. after all that, each pair is still in step: a correct group delivers */
  for (int i = 0; i < 16; ++i) out[i] = rank * 1000 + i;
  CHECK(ncclGroupStart());
  CHECK(ncclSend(out, 16, ncclInt32, next, comm, NULL));
  CHECK(ncclRecv(buf, 16, ncclInt32, prev, comm, NULL));
  CHECK(ncclGroupEnd());
  for (int i = 0; i < 16; ++i)
    if (buf[i] != prev * 1000 + i) FAIL("after the mismatches: element %d is %d", i, buf[i]);
  ncclResult_t async = ncclInternalError;
  CHECK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) FAIL("mismatched groups left the communicator failed (%d)", async);
}

/* ---- a send nobody receives ------------------------------------------------------------------- */

static void modeRefused(ncclComm_t comm) {
  int32_t v[4], w[4];
  for (int i = 0; i < 4; ++i) v[i] = rank * 100 + i;
  if (rank == 1) {
    EXPECT_ERROR(ncclSend(NULL, 4, ncclInt32, 0, comm, NULL), ncclInvalidArgument, "sendbuff is NULL");
    /* the group is refused at its end: its send and its receive both take their places */
    CHECK(ncclGroupStart());
    CHECK(ncclSend(v, 4, ncclInt32, 0, comm, NULL));
    EXPECT_ERROR(ncclRecv(NULL, 4, ncclInt32, 0, comm, NULL), ncclInvalidArgument, "recvbuff is NULL");
    EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "the group ran none of its");
  } else if (rank == 0) {
    EXPECT_ERROR(ncclRecv(w, 4, ncclInt32, 1, comm, NULL), ncclInvalidUsage, "rank 1 refused its send of it");
    CHECK(ncclGroupStart());
    CHECK(ncclRecv(w, 4, ncclInt32, 1, comm, NULL));
    CHECK(ncclSend(v, 4, ncclInt32, 1, comm, NULL));
    EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "rank 1 refused its");
  }
  /* the pair is in step: an exchange delivers the right data */
  if (rank <= 1) {
    const int peer = 1 - rank;
    for (int i = 0; i < 4; ++i) w[i] = -1;
    CHECK(ncclGroupStart());
    CHECK(ncclSend(v, 4, ncclInt32, peer, comm, NULL));
    CHECK(ncclRecv(w, 4, ncclInt32, peer, comm, NULL));
    CHECK(ncclGroupEnd());
    for (int i = 0; i < 4; ++i)
      if (w[i] != peer * 100 + i) FAIL("after the refusals, rank %d received %d at %d from rank %d", rank, w[i], i, peer);
  }
  int32_t one = 1, sum = 0;
  CHECK(ncclAllReduce(&one, &sum, 1, ncclInt32, ncclSum, comm, NULL));
  if (sum != nranks) FAIL("the all_reduce after the refusals gave %d, expected %d", sum, nranks);
}

static void modeUnmatched(ncclComm_t comm) {
  int32_t v = 7, w = 0;
  if (rank == 0) {
    /* rank 1 posts no receive: the wait ends at FORESTCC_TIMEOUT, never a hang */
    CHECK(ncclGroupStart());
    CHECK(ncclSend(&v, 1, ncclInt32, 1, comm, NULL));
    ncclResult_t r = ncclGroupEnd();
    /* its own timeout, or (as the others' all_reduce below waits for rank 0 as long) a peer's
     * timeout that poisoned the communicator first: an error naming the timeout either way */
    if (r != ncclTimeout && r != ncclRemoteError)
      FAIL("unmatched send: got %d (%s), expected ncclTimeout", r, ncclGetLastError(comm));
    else if (!strstr(ncclGetLastError(comm), "send of 4 bytes to rank 1 (waiting for its recv)") ||
             !strstr(ncclGetLastError(comm), "timed out"))
      FAIL("unmatched send: the error says: %s", ncclGetLastError(comm));
  }
  /* every rank's next call fails: the timeout poisoned the communicator (rank 1 and the others
   * wait in it for rank 0, which arrives only after its timeout) */
  ncclResult_t r = ncclAllReduce(&v, &w, 1, ncclInt32, ncclSum, comm, NULL);
  if (r == ncclSuccess) FAIL("the all_reduce after the unmatched send succeeded");
  ncclResult_t async = ncclSuccess;
  CHECK(ncclCommGetAsyncError(comm, &async));
  if (async == ncclSuccess) FAIL("the unmatched send left no async error");
}

int main(int argc, char** argv) {
  const char* mode = startProgram(argc, argv);
  ncclComm_t comm = worldComm(argv[2]);
  int destroy = 1;
  if (!strcmp(mode, "alltoallv")) modeAlltoallv(comm);
  else if (!strcmp(mode, "ring")) modeRing(comm);
  else if (!strcmp(mode, "self")) modeSelf(comm);
  else if (!strcmp(mode, "mismatch")) modeMismatch(comm);
  else if (!strcmp(mode, "refused") && nranks > 1) modeRefused(comm);
  else if (!strcmp(mode, "unmatched") && nranks > 1) modeUnmatched(comm), destroy = 0;
  else if (!strcmp(mode, "split") && nranks > 1) modeSplit(comm);
  else if (!strcmp(mode, "splitmismatch") && nranks > 1) modeSplitMismatch(comm), destroy = 0;
  else {
    fprintf(stderr, "unknown mode %s (or too few ranks for it)\n", mode);
    return 2;
  }
  if (destroy) {
    CHECK(ncclCommFinalize(comm));
    CHECK(ncclCommDestroy(comm));
  } else {
    CHECK(ncclCommAbort(comm));
  }
  if (failures) return 1;
  printf("OK %s %d\n", mode, rank);
  return 0;
}
