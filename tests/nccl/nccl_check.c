/* A C program written against NCCL's own nccl.h (the nvidia-nccl-cu13 wheel's), run on forestcc's
 * shim under forestcc-run on host buffers. Each mode checks one area and prints "OK <mode> <rank>"
 * at the end; any wrong value or unexpected result prints "ERROR ..." and exits non-zero.
 *
 *   nccl_check collectives <dir>   every collective x every datatype x every operator, vs a reference
 *   nccl_check groups <dir>        send/recv groups: a ring, all-to-all with unequal sizes, mixed groups
 *   nccl_check split <dir>         ncclCommSplit (colors, keys, NOCOLOR) and the new communicators
 *   nccl_check comms <dir>         non-blocking init, ncclMemAlloc, registration, queries, InitAll
 *   nccl_check abort <dir>         ncclCommAbort from another thread unblocks a waiting recv
 *   nccl_check errors <dir>        every error path: result code and ncclGetLastError text
 *   nccl_check forced <dir>        FORESTCC_NCCL_FORCE without a fallback: refused, never run
 *   nccl_check mismatch <dir>      ranks disagreeing on a count get an error, not a wrong answer
 *   nccl_check forwarded <dir>     FORESTCC_NCCL_FORCE=AllReduce with fake_nccl.so as the fallback
 *   nccl_check device <dir> [no-cuda-build]  GPU pointers (fake_libcuda.so preloaded): mixed calls refused
 *   nccl_check device-late <dir>   the fake driver loaded after the first calls is still seen
 *
 * <dir> is a directory shared by the ranks: rank 0 writes the ncclUniqueId there and the others
 * read it (the "broadcast the id" step every NCCL program has, done here without MPI). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_common.h"

/* The ABI as documented for 2.32 (the layout test compares every field with forestcc's header). */
_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId is 128 bytes");
_Static_assert(ncclInvalidUsage == 5 && ncclInProgress == 7 && ncclTimeout == 8, "ncclResult_t values");
_Static_assert(ncclBfloat16 == 9 && ncclFloat8e4m3 == 10 && ncclFloat8e5m2 == 11 && ncclNumTypes == 12,
               "ncclDataType_t values");
_Static_assert(ncclAvg == 4 && ncclNumOps == 5, "ncclRedOp_t values");
_Static_assert(NCCL_VERSION_CODE == 23203, "built against NCCL 2.32.3's header");

/* ---- element values of every datatype ---------------------------------------------------------- */

static const size_t typeSize[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
static const char* const typeName[ncclNumTypes] = {"int8",  "uint8", "int32", "uint32", "int64",  "uint64",
                                                    "half",  "float", "double", "bf16",  "f8e4m3", "f8e5m2"};
static const char* const opNames[] = {"sum", "prod", "max", "min", "avg", "premulsum", "premulsum-dev"};

/* fp8 with `man` mantissa bits and exponent bias `bias`: decode any code, encode values that are
 * exactly representable (the tests use small integers and their averages). */
static double fp8Decode(uint8_t v, int man, int bias) {
  int e = (v >> man) & ((1 << (7 - man)) - 1), m = v & ((1 << man) - 1);
  double x = e ? ldexp(1.0 + m / (double)(1 << man), e - bias) : ldexp(m / (double)(1 << man), 1 - bias);
  return v & 0x80 ? -x : x;
}
static uint8_t fp8Encode(double x, int man, int bias) {
  for (int v = 0; v < 256; ++v) /* slow and obviously right */
    if (fp8Decode((uint8_t)v, man, bias) == x) return (uint8_t)v;
  fprintf(stderr, "ERROR: %g is not an fp8 value\n", x);
  exit(1);
}

static double getValue(int t, const void* buf, size_t i) {
  const char* p = (const char*)buf + i * typeSize[t];
  switch (t) {
    case ncclInt8: return *(const int8_t*)p;
    case ncclUint8: return *(const uint8_t*)p;
    case ncclInt32: return *(const int32_t*)p;
    case ncclUint32: return *(const uint32_t*)p;
    case ncclInt64: return (double)*(const int64_t*)p;
    case ncclUint64: return (double)*(const uint64_t*)p;
    case ncclFloat16: return (double)*(const _Float16*)p;
    case ncclFloat32: return *(const float*)p;
    case ncclFloat64: return *(const double*)p;
    case ncclBfloat16: {
      uint32_t u = (uint32_t)*(const uint16_t*)p << 16;
      float f;
      memcpy(&f, &u, 4);
      return f;
    }
    case ncclFloat8e4m3: return fp8Decode(*(const uint8_t*)p, 3, 7);
    default: return fp8Decode(*(const uint8_t*)p, 2, 15);
  }
}

static void setValue(int t, void* buf, size_t i, double x) {
  char* p = (char*)buf + i * typeSize[t];
  switch (t) {
    case ncclInt8: *(int8_t*)p = (int8_t)x; break;
    case ncclUint8: *(uint8_t*)p = (uint8_t)x; break;
    case ncclInt32: *(int32_t*)p = (int32_t)x; break;
    case ncclUint32: *(uint32_t*)p = (uint32_t)x; break;
    case ncclInt64: *(int64_t*)p = (int64_t)x; break;
    case ncclUint64: *(uint64_t*)p = (uint64_t)x; break;
    case ncclFloat16: *(_Float16*)p = (_Float16)x; break;
    case ncclFloat32: *(float*)p = (float)x; break;
    case ncclFloat64: *(double*)p = x; break;
    case ncclBfloat16: {
      float f = (float)x;
      uint32_t u;
      memcpy(&u, &f, 4);
      *(uint16_t*)p = (uint16_t)(u >> 16); /* exact for the small values used */
      break;
    }
    case ncclFloat8e4m3: *(uint8_t*)p = fp8Encode(x, 3, 7); break;
    default: *(uint8_t*)p = fp8Encode(x, 2, 15); break;
  }
}

static int isInteger(int t) { return t <= ncclUint64; }

/* Rank r's input element i: small integers, so that every reduction is exact in every type. */
static double input(int op, int r, size_t i) {
  if (op == ncclProd) return 1 + (double)((r + i) % 2);       /* product <= 2^4 */
  if (op == ncclMax || op == ncclMin) return (double)((r * 3 + i * 5) % 7);
  return (double)((r + i) % 2);                                /* sums <= 4, scaled sums <= 10 */
}

static double scalarOf(int r) { return r + 1; } /* PreMulSum: each rank its own factor */

static double reference(int op, size_t i, int t) {
  double acc = op == ncclProd ? 1 : op == ncclMax ? -1e300 : op == ncclMin ? 1e300 : 0;
  for (int r = 0; r < nranks; ++r) {
    double v = input(op, r, i);
    if (op == ncclSum || op == ncclAvg) acc += v;
    else if (op == ncclProd) acc *= v;
    else if (op == ncclMax) acc = v > acc ? v : acc;
    else if (op == ncclMin) acc = v < acc ? v : acc;
    else acc += v * scalarOf(r); /* premulsum */
  }
  if (op == ncclAvg) acc = isInteger(t) ? (double)(long long)(acc / nranks) : acc / nranks;
  return acc;
}

/* Average in a narrow float type rounds: allow the type's half-ulp at the value. */
static int closeEnough(int t, int op, double got, double want) {
  if (op != ncclAvg || isInteger(t)) return got == want;
  double tol = t == ncclFloat8e4m3 ? 0.07 : t == ncclFloat8e5m2 ? 0.13 : t == ncclFloat16 ? 1e-3 :
               t == ncclBfloat16 ? 8e-3 : 1e-6;
  return fabs(got - want) <= tol * (fabs(want) > 1 ? fabs(want) : 1);
}

static void* buffer(int t, size_t count) { return calloc(count ? count : 1, typeSize[t]); }

static void expectBlock(const char* what, int t, int op, const void* buf, size_t from, size_t count,
                        double (*want)(size_t)) {
  for (size_t i = 0; i < count; ++i) {
    double got = getValue(t, buf, from + i), w = want(i);
    if (!closeEnough(t, op, got, w)) {
      FAIL("%s %s %s: element %zu is %g, expected %g", what, typeName[t], op >= 0 ? opNames[op] : "", from + i, got, w);
      return;
    }
  }
}

/* ---- collectives --------------------------------------------------------------------------------- */

static int curType, curOp, curRoot, curBlock;
static double wantReduced(size_t i) { return reference(curOp, i, curType); }
static double wantReducedBlock(size_t i) { return reference(curOp, curBlock + i, curType); }

static void fillInput(int t, int op, void* buf, size_t from, size_t count, int r) {
  for (size_t i = 0; i < count; ++i) setValue(t, buf, i, input(op, r, from + i));
}

static void checkReductions(ncclComm_t comm, int t, size_t count) {
  /* ops: the five built-ins, a PreMulSum with an immediate scalar, one with a "device" scalar in
   * host memory (read when the call runs: changed after creation) */
  for (int op = 0; op < 7; ++op) {
    ncclRedOp_t redop = (ncclRedOp_t)op;
    int refOp = op >= 5 ? 5 : op;
    char scalar[8], liveScalar[8];
    if (op == 5) {
      setValue(t, scalar, 0, scalarOf(rank));
      CHECK(ncclRedOpCreatePreMulSum(&redop, scalar, (ncclDataType_t)t, ncclScalarHostImmediate, comm));
      setValue(t, scalar, 0, 0); /* immediate: the value at creation counts */
    } else if (op == 6) {
      setValue(t, liveScalar, 0, 0);
      CHECK(ncclRedOpCreatePreMulSum(&redop, liveScalar, (ncclDataType_t)t, ncclScalarDevice, comm));
      setValue(t, liveScalar, 0, scalarOf(rank)); /* device residence: read when the call runs */
    }
    curType = t;
    curOp = refOp;
    /* all_reduce, out of place and in place */
    void* in = buffer(t, count);
    void* out = buffer(t, count);
    fillInput(t, refOp, in, 0, count, rank);
    CHECK(ncclAllReduce(in, out, count, (ncclDataType_t)t, redop, comm, NULL));
    expectBlock("all_reduce", t, refOp, out, 0, count, wantReduced);
    CHECK(ncclAllReduce(in, in, count, (ncclDataType_t)t, redop, comm, NULL));
    expectBlock("all_reduce in place", t, refOp, in, 0, count, wantReduced);
    /* reduce to the last rank */
    fillInput(t, refOp, in, 0, count, rank);
    memset(out, 0, count * typeSize[t]);
    CHECK(ncclReduce(in, rank == nranks - 1 ? out : NULL, count, (ncclDataType_t)t, redop, nranks - 1, comm, NULL));
    if (rank == nranks - 1) expectBlock("reduce", t, refOp, out, 0, count, wantReduced);
    free(in);
    free(out);
    /* reduce_scatter: count per rank */
    in = buffer(t, count * nranks);
    out = buffer(t, count);
    fillInput(t, refOp, in, 0, count * nranks, rank);
    CHECK(ncclReduceScatter(in, out, count, (ncclDataType_t)t, redop, comm, NULL));
    curBlock = rank * (int)count;
    expectBlock("reduce_scatter", t, refOp, out, 0, count, wantReducedBlock);
    free(in);
    free(out);
    if (op >= 5) CHECK(ncclRedOpDestroy(redop, comm));
  }
}

static double wantFromRank(size_t i) { return (double)curBlock + (double)(i % 3); }

static void checkMovement(ncclComm_t comm, int t, size_t count) {
  const ncclDataType_t dt = (ncclDataType_t)t;
  void* mine = buffer(t, count);
  void* all = buffer(t, count * nranks);
  for (size_t i = 0; i < count; ++i) setValue(t, mine, i, rank + (double)(i % 3));
  /* all_gather: block r is rank r's */
  CHECK(ncclAllGather(mine, all, count, dt, comm, NULL));
  for (int r = 0; r < nranks; ++r) {
    curBlock = r;
    expectBlock("all_gather", t, -1, all, r * count, count, wantFromRank);
  }
  /* broadcast from rank 1 % n, out of place; bcast in place from the last rank */
  curRoot = 1 % nranks;
  void* out = buffer(t, count);
  CHECK(ncclBroadcast(mine, out, count, dt, curRoot, comm, NULL));
  curBlock = curRoot;
  expectBlock("broadcast", t, -1, out, 0, count, wantFromRank);
  memcpy(out, mine, count * typeSize[t]);
  CHECK(ncclBcast(out, count, dt, nranks - 1, comm, NULL));
  curBlock = nranks - 1;
  expectBlock("bcast", t, -1, out, 0, count, wantFromRank);
  /* gather to rank 0, scatter from the last rank */
  memset(all, 0, count * nranks * typeSize[t]);
  CHECK(ncclGather(mine, rank == 0 ? all : NULL, count, dt, 0, comm, NULL));
  if (rank == 0)
    for (int r = 0; r < nranks; ++r) {
      curBlock = r;
      expectBlock("gather", t, -1, all, r * count, count, wantFromRank);
    }
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < count; ++i) setValue(t, all, r * count + i, r + (double)(i % 3));
  CHECK(ncclScatter(rank == nranks - 1 ? all : NULL, out, count, dt, nranks - 1, comm, NULL));
  curBlock = rank;
  expectBlock("scatter", t, -1, out, 0, count, wantFromRank);
  /* all_to_all, both spellings: block p of rank r's input is (r + p) + i%3 */
  void* send = buffer(t, count * nranks);
  void* recv = buffer(t, count * nranks);
  for (int p = 0; p < nranks; ++p)
    for (size_t i = 0; i < count; ++i) setValue(t, send, p * count + i, (rank + p) % 4 + (double)(i % 3));
  for (int spelling = 0; spelling < 2; ++spelling) {
    memset(recv, 0, count * nranks * typeSize[t]);
    if (spelling == 0) CHECK(ncclAlltoAll(send, recv, count, dt, comm, NULL));
    else {
      /* RCCL's spelling, exported too; looked up by name since NCCL's header and library lack it */
      typedef ncclResult_t (*AllToAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
      AllToAll ncclAllToAll = (AllToAll)dlsym(RTLD_DEFAULT, "ncclAllToAll");
      if (!ncclAllToAll) {
        FAIL("ncclAllToAll is not exported");
        break;
      }
      CHECK(ncclAllToAll(send, recv, count, dt, comm, NULL));
    }
    for (int p = 0; p < nranks; ++p) {
      curBlock = (p + rank) % 4;
      expectBlock(spelling ? "ncclAllToAll" : "ncclAlltoAll", t, -1, recv, p * count, count, wantFromRank);
    }
  }
  free(send);
  free(recv);
  free(mine);
  free(all);
  free(out);
}

static void modeCollectives(const char* dir) {
  ncclComm_t comm = worldComm(dir);
  const size_t counts[] = {37, 1, 0};
  for (int c = 0; c < 3; ++c)
    for (int t = 0; t < ncclNumTypes; ++t) {
      checkReductions(comm, t, counts[c]);
      checkMovement(comm, t, counts[c]);
    }
  /* a group of collectives completes together */
  float a[5], b[5];
  for (int i = 0; i < 5; ++i) a[i] = b[i] = (float)rank;
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(a, a, 5, ncclFloat32, ncclSum, comm, NULL));
  CHECK(ncclAllReduce(b, b, 5, ncclFloat32, ncclMax, comm, NULL));
  CHECK(ncclGroupEnd());
  for (int i = 0; i < 5; ++i)
    if (a[i] != nranks * (nranks - 1) / 2.0f || b[i] != nranks - 1) FAIL("grouped all_reduce: %g %g", a[i], b[i]);
  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
}

/* ---- groups of send/recv ---------------------------------------------------------------------- */

/* Elements rank `from` sends to rank `to` in the uneven all-to-all (zero for some pairs). */
static size_t unevenCount(int from, int to) { return (size_t)((from * 7 + to * 3) % 4) * 5; }

static void modeGroups(const char* dir) {
  ncclComm_t comm = worldComm(dir);
  /* a ring: send to the next rank, receive from the previous, twice to the same peers (FIFO) */
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  int64_t out1[50], out2[3], in1[50], in2[3];
  for (int i = 0; i < 50; ++i) out1[i] = rank * 1000 + i;
  for (int i = 0; i < 3; ++i) out2[i] = -rank - 1;
  CHECK(ncclGroupStart());
  CHECK(ncclSend(out1, 50, ncclInt64, next, comm, NULL));
  CHECK(ncclRecv(in1, 50, ncclInt64, prev, comm, NULL));
  CHECK(ncclSend(out2, 3, ncclInt64, next, comm, NULL));
  CHECK(ncclRecv(in2, 3, ncclInt64, prev, comm, NULL));
  CHECK(ncclGroupEnd());
  for (int i = 0; i < 50; ++i)
    if (in1[i] != prev * 1000 + i) FAIL("ring: in1[%d] = %lld", i, (long long)in1[i]);
  for (int i = 0; i < 3; ++i)
    if (in2[i] != -prev - 1) FAIL("ring: in2[%d] = %lld", i, (long long)in2[i]);

  /* all-to-all with unequal sizes, self included, as PyTorch's all_to_all_single with splits; in
   * a nested group, with a collective in the same group */
  size_t sendTotal = 0, recvTotal = 0;
  for (int p = 0; p < nranks; ++p) {
    sendTotal += unevenCount(rank, p);
    recvTotal += unevenCount(p, rank);
  }
  float* sendBuf = calloc(sendTotal + 1, sizeof(float));
  float* recvBuf = calloc(recvTotal + 1, sizeof(float));
  size_t off = 0;
  for (int p = 0; p < nranks; ++p)
    for (size_t i = 0; i < unevenCount(rank, p); ++i) sendBuf[off++] = (float)(rank * 100 + p * 10) + (float)i / 64;
  double total = rank;
  CHECK(ncclGroupStart());
  CHECK(ncclGroupStart());
  off = 0;
  for (int p = 0; p < nranks; ++p) {
    CHECK(ncclSend(sendBuf + off, unevenCount(rank, p), ncclFloat32, p, comm, NULL));
    off += unevenCount(rank, p);
  }
  CHECK(ncclGroupEnd());
  off = 0;
  for (int p = 0; p < nranks; ++p) {
    CHECK(ncclRecv(recvBuf + off, unevenCount(p, rank), ncclFloat32, p, comm, NULL));
    off += unevenCount(p, rank);
  }
  CHECK(ncclAllReduce(&total, &total, 1, ncclFloat64, ncclSum, comm, NULL));
  CHECK(ncclGroupEnd());
  off = 0;
  for (int p = 0; p < nranks; ++p)
    for (size_t i = 0; i < unevenCount(p, rank); ++i, ++off) {
      float want = (float)(p * 100 + rank * 10) + (float)i / 64;
      if (recvBuf[off] != want) FAIL("uneven all-to-all: from %d element %zu is %g, expected %g", p, i, recvBuf[off], want);
    }
  if (total != nranks * (nranks - 1) / 2.0) FAIL("all_reduce in the send/recv group: %g", total);
  free(sendBuf);
  free(recvBuf);

  /* a send and recv outside a group between ranks 0 and 1 (the others do not take part) */
  if (nranks > 1 && rank < 2) {
    int v = rank == 0 ? 42 : 0;
    if (rank == 0) CHECK(ncclSend(&v, 1, ncclInt32, 1, comm, NULL));
    else CHECK(ncclRecv(&v, 1, ncclInt32, 0, comm, NULL));
    if (v != 42) FAIL("plain send/recv: %d", v);
  }
  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
}

/* ---- split ------------------------------------------------------------------------------------- */

static void modeSplit(const char* dir) {
  ncclComm_t comm = worldComm(dir);
  /* two colors (even / odd ranks), keys reverse the order; with 3+ ranks rank 1 stays out */
  int out = nranks >= 3 && rank == 1;
  int color = out ? NCCL_SPLIT_NOCOLOR : rank % 2;
  ncclComm_t sub = (ncclComm_t)0x1;
  CHECK(ncclCommSplit(comm, color, -rank, &sub, NULL));
  if (out) {
    if (sub != NULL) FAIL("NCCL_SPLIT_NOCOLOR gave a communicator");
  } else {
    int members[64], m = 0;
    for (int r = nranks - 1; r >= 0; --r)
      if (r % 2 == color && !(nranks >= 3 && r == 1)) members[m++] = r;
    int subRank = -1, subSize = -1;
    CHECK(ncclCommCount(sub, &subSize));
    CHECK(ncclCommUserRank(sub, &subRank));
    if (subSize != m) FAIL("split: size %d, expected %d", subSize, m);
    if (subRank < 0 || subRank >= m || members[subRank] != rank) FAIL("split: rank %d is not at key order", subRank);
    /* the new communicator works: a sum of the old ranks over its members */
    int v = rank, want = 0;
    for (int i = 0; i < m; ++i) want += members[i];
    CHECK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, sub, NULL));
    if (v != want) FAIL("split all_reduce: %d, expected %d", v, want);
    /* and a split of the split: everyone alone */
    ncclComm_t single;
    CHECK(ncclCommSplit(sub, subRank, 0, &single, NULL));
    int n1 = 0;
    CHECK(ncclCommCount(single, &n1));
    if (n1 != 1) FAIL("split into singletons: size %d", n1);
    CHECK(ncclCommDestroy(single));
    CHECK(ncclCommFinalize(sub));
    CHECK(ncclCommDestroy(sub));
  }
  /* the parent still works after its children */
  int v = 1;
  CHECK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, NULL));
  if (v != nranks) FAIL("parent after split: %d", v);
  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
}

/* ---- communicators: non-blocking init, memory, registration, queries, InitAll --------------------- */

static void* initAllRank(void* arg) {
  (void)arg;
  return NULL;
}

static void modeComms(const char* dir) {
  int version = 0;
  CHECK(ncclGetVersion(&version));
  if (version != 23203) FAIL("ncclGetVersion: %d, expected 23203", version);

  /* non-blocking: InProgress (or Success), polled with ncclCommGetAsyncError */
  ncclUniqueId id;
  shareId(dir, "nonblocking.id", &id, rank == 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "nonblocking";
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  if (r != ncclInProgress && r != ncclSuccess) FAIL("non-blocking init returned %d: %s", r, ncclGetLastError(NULL));
  if (!comm) FAIL("non-blocking init gave no communicator");
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    CHECK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclInProgress) usleep(1000);
  }
  if (state != ncclSuccess) FAIL("non-blocking init ended with %d: %s", state, ncclGetLastError(comm));

  int count = 0, me = -1, device = 7;
  CHECK(ncclCommCount(comm, &count));
  CHECK(ncclCommUserRank(comm, &me));
  CHECK(ncclCommCuDevice(comm, &device));
  if (count != nranks || me != rank) FAIL("count %d rank %d", count, me);
  if (device != -1) FAIL("ncclCommCuDevice: %d, expected -1 (no CUDA in this process)", device);

  /* ncclMemAlloc: host memory peers map; collectives on it and registered buffers */
  double* buf = NULL;
  CHECK(ncclMemAlloc((void**)&buf, 1000 * sizeof(double)));
  for (int i = 0; i < 1000; ++i) buf[i] = rank + i;
  void* handle = NULL;
  CHECK(ncclCommRegister(comm, buf, 1000 * sizeof(double), &handle));
  /* the communicator is non-blocking: the call may be in progress when it returns */
  r = ncclAllReduce(buf, buf, 1000, ncclFloat64, ncclSum, comm, NULL);
  if (r != ncclInProgress && r != ncclSuccess) FAIL("non-blocking all_reduce returned %d", r);
  do CHECK(ncclCommGetAsyncError(comm, &state));
  while (state == ncclInProgress); /* ends: the others make the same call (tests/nccl/nonblocking_check.c checks more) */
  if (state != ncclSuccess) FAIL("non-blocking all_reduce ended with %d: %s", state, ncclGetLastError(comm));
  for (int i = 0; i < 1000; ++i)
    if (buf[i] != (double)nranks * i + nranks * (nranks - 1) / 2.0) {
      FAIL("all_reduce on ncclMemAlloc memory: [%d] = %g", i, buf[i]);
      break;
    }
  CHECK(ncclCommDeregister(comm, handle));
  CHECK(ncclMemFree(buf));
  void* none = (void*)0x1;
  CHECK(ncclMemAlloc(&none, 0));
  if (none != NULL) FAIL("ncclMemAlloc of 0 bytes gave %p", none);

  /* MemStats, Suspend/Resume: no GPU memory is held */
  uint64_t value = 99;
  CHECK(ncclCommMemStats(comm, ncclStatGpuMemTotal, &value));
  if (value != 0) FAIL("GPU memory of a host communicator: %llu", (unsigned long long)value);
  CHECK(ncclCommSuspend(comm, 0));
  CHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &value));
  if (value != 1) FAIL("suspended: %llu", (unsigned long long)value);
  CHECK(ncclCommResume(comm));
  r = ncclCommFinalize(comm); /* non-blocking: a barrier in the background */
  if (r != ncclInProgress && r != ncclSuccess) FAIL("non-blocking finalize returned %d", r);
  do CHECK(ncclCommGetAsyncError(comm, &state));
  while (state == ncclInProgress);
  if (state != ncclSuccess) FAIL("non-blocking finalize ended with %d: %s", state, ncclGetLastError(comm));
  CHECK(ncclCommDestroy(comm));
  CHECK(ncclCommDestroy(NULL));

  /* ncclCommInitAll: two ranks in this process (rank 0 of the job only), used in one group */
  if (rank == 0) {
    (void)initAllRank;
    ncclComm_t comms[2];
    int devs[2] = {3, 5};
    CHECK(ncclCommInitAll(comms, 2, devs));
    int d0, d1;
    CHECK(ncclCommCuDevice(comms[0], &d0));
    CHECK(ncclCommCuDevice(comms[1], &d1));
    if (d0 != 3 || d1 != 5) FAIL("InitAll devices %d %d", d0, d1);
    float x[2][4] = {{1, 2, 3, 4}, {10, 20, 30, 40}};
    CHECK(ncclGroupStart());
    for (int i = 0; i < 2; ++i) CHECK(ncclAllReduce(x[i], x[i], 4, ncclFloat32, ncclSum, comms[i], NULL));
    CHECK(ncclGroupEnd());
    for (int i = 0; i < 4; ++i)
      if (x[0][i] != 11 * (i + 1) || x[1][i] != 11 * (i + 1)) FAIL("InitAll all_reduce: %g %g", x[0][i], x[1][i]);
    CHECK(ncclCommDestroy(comms[0]));
    CHECK(ncclCommDestroy(comms[1]));
  }
}

/* ---- abort from another thread ----------------------------------------------------------------- */

static volatile int recvStarted;
static ncclComm_t abortComm;

static void* abortLater(void* arg) {
  (void)arg;
  while (!recvStarted) usleep(1000);
  usleep(300 * 1000); /* let the receive reach its wait (if not, it finds the abort when it gets there) */
  CHECK(ncclCommAbort(abortComm));
  return NULL;
}

static void modeAbort(const char* dir) {
  abortComm = worldComm(dir);
  if (rank == 0 && nranks > 1) {
    /* rank 1 never sends: only the abort can end this receive (FORESTCC_TIMEOUT is long) */
    pthread_t t;
    pthread_create(&t, NULL, abortLater, NULL);
    int v = 0;
    recvStarted = 1;
    ncclResult_t r = ncclRecv(&v, 1, ncclInt32, 1, abortComm, NULL);
    pthread_join(t, NULL);
    const char* e = ncclGetLastError(NULL);
    if (r == ncclSuccess) FAIL("the receive succeeded after ncclCommAbort");
    else if (!strstr(e, "ncclCommAbort")) FAIL("the receive failed (%d) without naming the abort: %s", r, e);
    touch(dir, "rank0.done");
  } else if (rank == 0) {
    CHECK(ncclCommAbort(abortComm)); /* alone: nothing waits, abort still frees */
  } else {
    waitFor(dir, "rank0.done"); /* stay alive and silent until rank 0 saw its abort */
    CHECK(ncclCommAbort(abortComm));
  }
}

/* ---- error paths ---------------------------------------------------------------------------------- */

static void modeErrors(const char* dir) {
  ncclComm_t comm = worldComm(dir);
  float x[4] = {0}, y[4] = {0};
  ncclUniqueId id;
  memset(&id, 0, sizeof id);

  EXPECT_ERROR(ncclGetVersion(NULL), ncclInvalidArgument, "version is NULL");
  EXPECT_ERROR(ncclGetUniqueId(NULL), ncclInvalidArgument, "uniqueId is NULL");
  ncclComm_t bad;
  EXPECT_ERROR(ncclCommInitRank(&bad, nranks, id, nranks), ncclInvalidArgument, "out of range");
  EXPECT_ERROR(ncclCommInitRank(&bad, 0, id, 0), ncclInvalidArgument, "nranks is 0");
  EXPECT_ERROR(ncclCommInitRank(&bad, 1, id, 0), ncclInvalidUsage, "");  /* an all-zero id is no id */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  EXPECT_ERROR(ncclCommInitRankConfig(&bad, 1, id, 0, &config), ncclInvalidArgument, "NCCL_CONFIG_INITIALIZER");
  ncclConfig_t config2 = NCCL_CONFIG_INITIALIZER;
  config2.blocking = 2;
  EXPECT_ERROR(ncclCommInitRankConfig(&bad, 1, id, 0, &config2), ncclInvalidArgument, "blocking is 2");

  EXPECT_ERROR(ncclAllReduce(x, y, 4, (ncclDataType_t)12, ncclSum, comm, NULL), ncclInvalidArgument, "datatype 12");
  EXPECT_ERROR(ncclAllReduce(x, y, 4, ncclFloat32, (ncclRedOp_t)99, comm, NULL), ncclInvalidArgument, "op 99");
  EXPECT_ERROR(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidArgument, "comm is NULL");
  EXPECT_ERROR(ncclAllReduce(NULL, y, 4, ncclFloat32, ncclSum, comm, NULL), ncclInvalidArgument, "sendbuff is NULL");
  EXPECT_ERROR(ncclAllReduce(x, NULL, 4, ncclFloat32, ncclSum, comm, NULL), ncclInvalidArgument, "recvbuff is NULL");
  EXPECT_ERROR(ncclBroadcast(x, y, 4, ncclFloat32, nranks, comm, NULL), ncclInvalidArgument, "root");
  EXPECT_ERROR(ncclReduce(x, y, 4, ncclFloat32, ncclSum, -1, comm, NULL), ncclInvalidArgument, "root -1");
  EXPECT_ERROR(ncclSend(x, 4, ncclFloat32, nranks, comm, NULL), ncclInvalidArgument, "peer");
  EXPECT_ERROR(ncclRecv(y, 4, ncclFloat32, -1, comm, NULL), ncclInvalidArgument, "peer -1");
  EXPECT_ERROR(ncclSend(x, 4, ncclFloat32, rank, comm, NULL), ncclInvalidUsage, "this rank itself");
  /* counts whose bytes wrap around 64 bits (they would move 4 bytes, or none, and succeed) */
  const size_t wraps = ((size_t)1 << 62) + 1; /* 4 bytes past 2**64 as int32 */
  EXPECT_ERROR(ncclAllReduce(x, y, wraps, ncclInt32, ncclSum, comm, NULL), ncclInvalidArgument, "more memory");
  EXPECT_ERROR(ncclBroadcast(x, y, wraps, ncclInt32, 0, comm, NULL), ncclInvalidArgument, "more memory");
  EXPECT_ERROR(ncclAllGather(x, y, (size_t)1 << 63, ncclInt8, comm, NULL), ncclInvalidArgument,
               nranks > 1 ? "ranks is more memory" : "more memory"); /* count times ranks wraps */
  EXPECT_ERROR(ncclReduceScatter(x, y, wraps, ncclInt32, ncclSum, comm, NULL), ncclInvalidArgument, "more memory");
  EXPECT_ERROR(ncclAlltoAll(x, y, wraps, ncclInt32, comm, NULL), ncclInvalidArgument, "more memory");
  if (nranks > 1) { /* a refused send still takes its place: a ring of them meets a ring of refused receives */
    EXPECT_ERROR(ncclSend(x, wraps, ncclInt32, (rank + 1) % nranks, comm, NULL), ncclInvalidArgument, "more memory");
    EXPECT_ERROR(ncclRecv(y, wraps, ncclInt32, (rank + nranks - 1) % nranks, comm, NULL), ncclInvalidArgument,
                 "more memory");
  }

  /* operators */
  ncclRedOp_t op;
  float two = 2;
  EXPECT_ERROR(ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat32, ncclScalarHostImmediate, comm), ncclInvalidArgument,
               "scalar is NULL");
  EXPECT_ERROR(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat32, (ncclScalarResidence_t)7, comm),
               ncclInvalidArgument, "residence 7");
  CHECK(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat32, ncclScalarHostImmediate, comm));
  if ((int)op < ncclNumOps) FAIL("a PreMulSum operator numbered %d, below ncclNumOps", (int)op);
  EXPECT_ERROR(ncclAllReduce(x, y, 4, ncclFloat64, op, comm, NULL), ncclInvalidArgument, "created for ncclFloat32");
  EXPECT_ERROR(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "built in");
  CHECK(ncclRedOpDestroy(op, comm));
  EXPECT_ERROR(ncclRedOpDestroy(op, comm), ncclInvalidArgument, "destroyed already");
  EXPECT_ERROR(ncclAllReduce(x, y, 4, ncclFloat32, op, comm, NULL), ncclInvalidArgument, "PreMulSum operator");

  /* groups */
  EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "without a matching ncclGroupStart");
  y[0] = -5;
  CHECK(ncclGroupStart());
  x[0] = 1;
  CHECK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, comm, NULL));
  EXPECT_ERROR(ncclAllReduce(x, y, 4, (ncclDataType_t)-3, ncclSum, comm, NULL), ncclInvalidArgument, "datatype -3");
  EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "ran none of its 1 operations");
  if (y[0] != -5) FAIL("a refused group ran its other operation (y[0] = %g)", y[0]);
  if (nranks > 1) { /* a send and its recv that disagree on the size */
    int peer = rank ^ 1;
    if (peer < nranks) {
      int a[5] = {0}, b[5];
      CHECK(ncclGroupStart());
      CHECK(ncclSend(a, rank % 2 ? 5 : 4, ncclInt32, peer, comm, NULL));
      CHECK(ncclRecv(b, rank % 2 ? 5 : 4, ncclInt32, peer, comm, NULL));
      EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "bytes");
    }
  }
  {
    int a = 1, b = 0;
    CHECK(ncclGroupStart());
    CHECK(ncclSend(&a, 1, ncclInt32, rank, comm, NULL));
    CHECK(ncclRecv(&b, 2, ncclInt32, rank, comm, NULL));
    EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "its recv expects 8");
  }
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  CHECK(ncclGroupStart());
  EXPECT_ERROR(ncclGroupSimulateEnd(&sim), ncclInvalidUsage, "cannot estimate");
  EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "without a matching ncclGroupStart"); /* the group was ended */

  /* memory and registration */
  EXPECT_ERROR(ncclMemAlloc(NULL, 8), ncclInvalidArgument, "ptr is NULL");
  EXPECT_ERROR(ncclMemFree(x), ncclInvalidArgument, "not returned by ncclMemAlloc");
  void* h;
  EXPECT_ERROR(ncclCommRegister(comm, x, sizeof x, NULL), ncclInvalidArgument, "handle is NULL");
  EXPECT_ERROR(ncclCommDeregister(comm, x), ncclInvalidArgument, "not returned by ncclCommRegister");
  CHECK(ncclCommRegister(comm, x, sizeof x, &h));
  CHECK(ncclCommDeregister(comm, h));

  /* what forestcc does not run, without a fallback: refused with the reason */
  ncclWindow_t win;
  EXPECT_ERROR(ncclCommWindowRegister(comm, x, sizeof x, &win, 0), ncclInvalidUsage, "no native ncclCommWindowRegister");
  EXPECT_ERROR(ncclSignal(0, 0, 0, 0, comm, NULL), ncclInvalidUsage, "no native ncclSignal");
  ncclCollConfig_t cc = NCCL_COLLCONFIG_INITIALIZER;
  cc.algSelection = "ring";
  EXPECT_ERROR(ncclAllReduceConfig(x, y, 4, ncclFloat32, ncclSum, comm, NULL, &cc), ncclInvalidUsage, "algSelection");
  ncclEncryptionConfig_t enc = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  CHECK(ncclSetEncryption(&enc));
  enc.mode = NCCL_ENCRYPTION_MODE_PSK;
  EXPECT_ERROR(ncclSetEncryption(&enc), ncclInvalidUsage, "do not encrypt");
  ncclParamHandle_t ph;
  EXPECT_ERROR(ncclParamBind(&ph, "NCCL_PROTO"), ncclInvalidUsage, "fallback");

  /* every result code has its own text */
  for (int a = 0; a < ncclNumResults; ++a)
    for (int b = a + 1; b < ncclNumResults; ++b)
      if (!strcmp(ncclGetErrorString((ncclResult_t)a), ncclGetErrorString((ncclResult_t)b)))
        FAIL("codes %d and %d share the text '%s'", a, b, ncclGetErrorString((ncclResult_t)a));

  /* the communicator is still healthy after refused calls */
  ncclResult_t async;
  CHECK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) FAIL("refused arguments poisoned the communicator (%d)", async);
  x[0] = 1;
  CHECK(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, NULL));
  if (x[0] != nranks) FAIL("all_reduce after the errors: %g", x[0]);
  CHECK(ncclCommFinalize(comm));
  EXPECT_ERROR(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidUsage, "finalized");
  CHECK(ncclCommDestroy(comm));
  /* a destroyed handle is refused by every entry point, not used (before: a call on freed memory) */
  EXPECT_ERROR(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidArgument, "was destroyed");
  int count;
  EXPECT_ERROR(ncclCommCount(comm, &count), ncclInvalidArgument, "was destroyed");
  EXPECT_ERROR(ncclSend(x, 1, ncclFloat32, 0, comm, NULL), ncclInvalidArgument, "was destroyed");
  EXPECT_ERROR(ncclCommDestroy(comm), ncclInvalidArgument, "was destroyed");
  EXPECT_ERROR(ncclCommAbort(comm), ncclInvalidArgument, "was destroyed");
  EXPECT_ERROR(ncclCommRevoke(comm, 0), ncclInvalidArgument, "was destroyed");
}

/* FORESTCC_NCCL_FORCE=AllReduce and no fallback: the forced call and its whole group are refused. */
static void modeForced(const char* dir) {
  ncclComm_t comm = worldComm(dir);
  float x = 1, y = -1;
  EXPECT_ERROR(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidUsage, "FORESTCC_NCCL_FORCE");
  if (y != -1) FAIL("the forced all_reduce ran natively");
  printf("REASON %s\n", ncclGetLastError(NULL)); /* the test checks the fallback's part of it */
  CHECK(ncclGroupStart());
  CHECK(ncclBroadcast(&x, &y, 1, ncclFloat32, 0, comm, NULL));
  CHECK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL));
  EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "rest of its group");
  if (y != -1) FAIL("the group's broadcast ran natively while its all_reduce could not");
  CHECK(ncclBroadcast(&x, &y, 1, ncclFloat32, 0, comm, NULL)); /* not forced: native */
  if (y != 1) FAIL("broadcast: %g", y);
  CHECK(ncclCommDestroy(comm));
}

/* FORESTCC_NCCL_FORCE=AllReduce, FORESTCC_NCCL_FALLBACK=fake_nccl.so (which writes 4242 for an
 * all_reduce and 4343 for a broadcast): forced calls and their groups go there, the rest stays. */
static void modeForwarded(const char* dir) {
  ncclComm_t comm = worldComm(dir);
  float x = 1, y = -1;
  CHECK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL));
  if (y != 4242) FAIL("the forced all_reduce did not run in the fallback: %g", y);
  x = (float)rank;
  CHECK(ncclBroadcast(&x, &y, 1, ncclFloat32, 0, comm, NULL));
  if (y != 0) FAIL("a broadcast that is not forced did not run natively: %g", y);
  float z = -1;
  CHECK(ncclGroupStart());
  CHECK(ncclBroadcast(&x, &z, 1, ncclFloat32, 0, comm, NULL));
  CHECK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL));
  CHECK(ncclGroupEnd());
  if (z != 4343) FAIL("the group was split: its broadcast ran natively (%g)", z);
  ncclWindow_t win = NULL;
  CHECK(ncclCommWindowRegister(comm, &x, sizeof x, &win, 0));
  if (win != (ncclWindow_t)0x5151) FAIL("ncclCommWindowRegister was not forwarded");
  CHECK(ncclCommDestroy(comm));
}

/* With fake_libcuda.so preloaded, 0xdead0000 is "GPU memory" on device 6: a call with one GPU and
 * one host buffer is refused with a message; one on GPU memory only is refused too when forestcc
 * was built without CUDA (argv[3] "no-cuda-build"; no fallback here); a scalar in GPU memory must
 * be ncclScalarDevice, and is read when the call runs (the fake driver cannot copy: its error
 * comes back); host buffers still run natively, and ncclCommCuDevice reports the current device. */
static void modeDevice(const char* dir, int cudaBuild) {
  ncclComm_t comm = worldComm(dir);
  void* gpu = (void*)0xdead0000;
  float x = 1, y = -1;
  EXPECT_ERROR(ncclAllReduce(gpu, &y, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidUsage,
               "sendbuff is GPU memory (device 6) but recvbuff is host memory");
  EXPECT_ERROR(ncclAllGather(&x, gpu, 1, ncclFloat32, comm, NULL), ncclInvalidUsage,
               "sendbuff is host memory but recvbuff is GPU memory (device 6)");
  if (!cudaBuild)
    EXPECT_ERROR(ncclAllReduce(gpu, gpu, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidUsage,
                 "this forestcc build has no CUDA");
  /* buffers on another device than the communicator's (6) */
  void* gpu7 = (void*)0xdeae0000;
  EXPECT_ERROR(ncclAllReduce(gpu7, gpu7, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidUsage,
               "the buffers are on CUDA device 7, but the communicator was made on device 6");
  EXPECT_ERROR(ncclAllReduce(gpu, gpu7, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidUsage,
               "sendbuff is GPU memory (device 6) but recvbuff is GPU memory (device 7)");
  /* a group's sends and receives are all on the GPU or all on the host */
  CHECK(ncclGroupStart());
  CHECK(ncclSend(&x, 1, ncclFloat32, (rank + 1) % nranks, comm, NULL));
  CHECK(ncclRecv(gpu, 1, ncclFloat32, (rank + nranks - 1) % nranks, comm, NULL));
  EXPECT_ERROR(ncclGroupEnd(), ncclInvalidUsage, "all on the GPU or all on the host");
  if (y != -1) FAIL("a refused call wrote its output");
  ncclRedOp_t op;
  EXPECT_ERROR(ncclRedOpCreatePreMulSum(&op, gpu, ncclFloat32, ncclScalarHostImmediate, comm), ncclInvalidArgument,
               "pass ncclScalarDevice for a scalar in GPU memory");
  CHECK(ncclRedOpCreatePreMulSum(&op, gpu, ncclFloat32, ncclScalarDevice, comm));
  EXPECT_ERROR(ncclAllReduce(&x, &y, 1, ncclFloat32, op, comm, NULL), ncclUnhandledCudaError, "CUDA driver");
  CHECK(ncclRedOpDestroy(op, comm));
  CHECK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL));
  if (y != nranks) FAIL("host all_reduce beside the fake driver: %g", y);
  int device = -1;
  CHECK(ncclCommCuDevice(comm, &device));
  if (device != 6) FAIL("ncclCommCuDevice: %d, expected the current device 6", device);
  CHECK(ncclCommDestroy(comm));
}

/* CUDA loaded only after the first calls (FORESTCC_TEST_LIBCUDA names fake_libcuda.so): a
 * communicator made afterwards sees GPU pointers (the shim looks for the driver again at init),
 * so a host/GPU mix is refused rather than read as host memory. */
static void modeDeviceLate(const char* dir) {
  ncclComm_t comm = worldComm(dir);
  float x = 1, y = -1;
  CHECK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL)); /* before CUDA is loaded */
  if (!dlopen(getenv("FORESTCC_TEST_LIBCUDA"), RTLD_NOW | RTLD_GLOBAL)) FAIL("cannot load the fake driver: %s", dlerror());
  ncclComm_t later;
  CHECK(ncclCommSplit(comm, 0, rank, &later, NULL));
  void* gpu = (void*)0xdead0000;
  EXPECT_ERROR(ncclAllReduce(gpu, &y, 1, ncclFloat32, ncclSum, later, NULL), ncclInvalidUsage,
               "sendbuff is GPU memory (device 6) but recvbuff is host memory");
  CHECK(ncclCommDestroy(later));
  CHECK(ncclCommDestroy(comm));
}

/* The ranks pass different counts: an error on every rank, never a wrong answer. */
static void modeMismatch(const char* dir) {
  ncclComm_t comm = worldComm(dir);
  float x[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  ncclResult_t r = ncclAllReduce(x, x, rank == 0 ? 8 : 7, ncclFloat32, ncclSum, comm, NULL);
  if (r == ncclSuccess) FAIL("ranks with different counts got success");
  ncclResult_t async = ncclSuccess;
  CHECK(ncclCommGetAsyncError(comm, &async));
  if (async == ncclSuccess) FAIL("the failed call left no async error");
  CHECK(ncclCommAbort(comm));
}

/* Rank 0 sums scaled inputs (PreMulSum), the others plain ones: an error on every rank (the sum
 * of a PreMulSum is a call of its own in the stamps), never a success with a mixed result. */
static void modePremulMismatch(const char* dir) {
  ncclComm_t comm = worldComm(dir);
  int a[8] = {1, 1, 1, 1, 1, 1, 1, 1}, two = 2;
  ncclRedOp_t op = ncclSum;
  if (rank == 0) CHECK(ncclRedOpCreatePreMulSum(&op, &two, ncclInt32, ncclScalarHostImmediate, comm));
  ncclResult_t r = ncclAllReduce(a, a, 8, ncclInt32, op, comm, NULL);
  if (r == ncclSuccess) FAIL("PreMulSum on rank 0 against Sum elsewhere returned success (a[0] = %d)", a[0]);
  if (!strstr(ncclGetLastError(comm), "premul_sum")) FAIL("the error does not name the PreMulSum: %s",
                                                          ncclGetLastError(comm));
  CHECK(ncclCommAbort(comm));
}

/* Rank 1's call fails in the shim's own work after it was accepted (its PreMulSum operator is
 * destroyed between the call in a group and ncclGroupEnd), and rank 1 goes on to its next
 * all_reduce: the failure is a refusal too, so rank 0's first all_reduce fails naming rank 1
 * instead of meeting rank 1's second (both plain sums of 8 int32: they would return, mixed). */
static void modeRefusedLate(const char* dir) {
  ncclComm_t comm = worldComm(dir);
  int a[8], b[8], one = 1;
  for (int i = 0; i < 8; ++i) a[i] = rank + i;
  ncclResult_t r;
  if (rank == 1) {
    ncclRedOp_t op;
    CHECK(ncclRedOpCreatePreMulSum(&op, &one, ncclInt32, ncclScalarHostImmediate, comm));
    CHECK(ncclGroupStart());
    CHECK(ncclAllReduce(a, b, 8, ncclInt32, op, comm, NULL));
    CHECK(ncclRedOpDestroy(op, comm));
    if (ncclGroupEnd() == ncclSuccess) FAIL("a group whose operator was destroyed returned success");
    r = ncclAllReduce(a, b, 8, ncclInt32, ncclSum, comm, NULL);
    if (r == ncclSuccess) FAIL("the call after the refused one returned success (b[0] = %d)", b[0]);
  } else {
    r = ncclAllReduce(a, b, 8, ncclInt32, ncclSum, comm, NULL);
    if (r == ncclSuccess) FAIL("the call rank 1 refused returned success (b[0] = %d)", b[0]);
    else if (!strstr(ncclGetLastError(comm), "rank 1 refused its part of this call") &&
             !strstr(ncclGetLastError(comm), "this rank refused its part of collective"))
      FAIL("it failed for another reason: %s", ncclGetLastError(comm));
    if (ncclAllReduce(a, b, 8, ncclInt32, ncclSum, comm, NULL) == ncclSuccess) FAIL("the next call returned success");
  }
  CHECK(ncclCommAbort(comm));
}

/* NCCL's in-place forms of the rooted collectives, every root: Reduce with sendbuff == recvbuff
 * on every rank (as PyTorch's reduce calls it), Gather with the root's sendbuff its block of
 * recvbuff, Scatter with the root's recvbuff its block of sendbuff. */
static void modeInPlace(const char* dir) {
  ncclComm_t comm = worldComm(dir);
  enum { C = 5 };
  int* all = calloc((size_t)nranks * C, sizeof(int));
  for (int root = 0; root < nranks; ++root) {
    int a[C];
    for (int i = 0; i < C; ++i) a[i] = rank * 100 + i;
    CHECK(ncclReduce(a, a, C, ncclInt32, ncclSum, root, comm, NULL));
    if (rank == root)
      for (int i = 0; i < C; ++i)
        if (a[i] != 100 * nranks * (nranks - 1) / 2 + nranks * i) FAIL("in-place reduce to %d: a[%d] = %d", root, i, a[i]);
    for (int i = 0; i < C; ++i) a[i] = rank * 100 + i;  /* a non-root's sendbuff is its input: unchanged */
    for (int r = 0; r < nranks; ++r)
      for (int i = 0; i < C; ++i) all[r * C + i] = r == rank ? rank * 100 + i : -1;
    if (rank == root) CHECK(ncclGather(all + root * C, all, C, ncclInt32, root, comm, NULL));
    else CHECK(ncclGather(a, NULL, C, ncclInt32, root, comm, NULL));
    if (rank == root)
      for (int k = 0; k < nranks * C; ++k)
        if (all[k] != (k / C) * 100 + k % C) FAIL("in-place gather to %d: all[%d] = %d", root, k, all[k]);
    for (int k = 0; k < nranks * C; ++k) all[k] = rank == root ? 1000 + k : -1;
    int got[C];
    if (rank == root) CHECK(ncclScatter(all, all + root * C, C, ncclInt32, root, comm, NULL));
    else CHECK(ncclScatter(NULL, got, C, ncclInt32, root, comm, NULL));
    for (int i = 0; i < C; ++i) {
      const int v = rank == root ? all[root * C + i] : got[i];
      if (v != 1000 + rank * C + i) FAIL("in-place scatter from %d: element %d = %d", root, i, v);
    }
  }
  free(all);
  CHECK(ncclCommDestroy(comm));
}

/* Rank 1's call is refused (a NULL recvbuff; in a group, a bad datatype beside a valid call) and
 * it goes on to its next all_reduce. The refusal takes the call's place (schedules/README.md,
 * "Refused calls"): every other rank's call fails naming rank 1, and so does every next call,
 * never ncclSuccess with the data of two different calls. */
static void modeRefused(const char* dir, int inGroup) {
  ncclComm_t comm = worldComm(dir);
  int a[8], b[8];
  for (int it = 0; it < 2; ++it) {
    for (int i = 0; i < 8; ++i) a[i] = (it + 1) * 1000 + rank * 10 + i;
    ncclResult_t r;
    if (rank == 1 && it == 0 && inGroup) {
      CHECK(ncclGroupStart());
      CHECK(ncclAllReduce(a, b, 8, ncclInt32, ncclSum, comm, NULL));
      ncclAllReduce(a, b, 8, (ncclDataType_t)77, ncclSum, comm, NULL); /* refused: the group runs nothing */
      r = ncclGroupEnd();
    } else if (inGroup) {
      CHECK(ncclGroupStart());
      CHECK(ncclAllReduce(a, b, 8, ncclInt32, ncclSum, comm, NULL));
      CHECK(ncclAllReduce(a, b, 8, ncclInt32, ncclSum, comm, NULL));
      r = ncclGroupEnd();
    } else {
      r = ncclAllReduce(a, rank == 1 && it == 0 ? NULL : b, 8, ncclInt32, ncclSum, comm, NULL);
    }
    if (r == ncclSuccess) FAIL("call %d returned ncclSuccess after rank 1's refusal (b[0] = %d)", it, b[0]);
    /* found here, or as rank 1 reported it (its next call may find the mismatch first) */
    if (it == 0 && rank != 1 && !strstr(ncclGetLastError(comm), "rank 1 refused its part of this call") &&
        !strstr(ncclGetLastError(comm), "this rank refused its part of collective"))
      FAIL("call 0 failed for another reason: %s", ncclGetLastError(comm));
  }
  CHECK(ncclCommAbort(comm));
}

int main(int argc, char** argv) {
  const char* mode = startProgram(argc, argv);
  if (!strcmp(mode, "collectives")) modeCollectives(argv[2]);
  else if (!strcmp(mode, "groups")) modeGroups(argv[2]);
  else if (!strcmp(mode, "split")) modeSplit(argv[2]);
  else if (!strcmp(mode, "comms")) modeComms(argv[2]);
  else if (!strcmp(mode, "abort")) modeAbort(argv[2]);
  else if (!strcmp(mode, "errors")) modeErrors(argv[2]);
  else if (!strcmp(mode, "inplace")) modeInPlace(argv[2]);
  else if (!strcmp(mode, "premulmismatch")) modePremulMismatch(argv[2]);
  else if (!strcmp(mode, "refused")) modeRefused(argv[2], 0);
  else if (!strcmp(mode, "refusedlate")) modeRefusedLate(argv[2]);
  else if (!strcmp(mode, "refusedgroup")) modeRefused(argv[2], 1);
  else if (!strcmp(mode, "forced")) modeForced(argv[2]);
  else if (!strcmp(mode, "mismatch")) modeMismatch(argv[2]);
  else if (!strcmp(mode, "forwarded")) modeForwarded(argv[2]);
  else if (!strcmp(mode, "device-late")) modeDeviceLate(argv[2]);
  else if (!strcmp(mode, "device")) modeDevice(argv[2], !(argc > 3 && !strcmp(argv[3], "no-cuda-build")));
  else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  if (failures) return 1;
  printf("OK %s %d\n", mode, rank);
  return 0;
}
