/* The NCCL shim on GPU memory (docs/nccl-shim.md, "GPU memory"): ranks under forestcc-run, all on
 * CUDA device 0 (several processes share one GPU through CUDA IPC; the real NCCL refuses that).
 * Buffers come from the CUDA driver API (libcuda.so.1, loaded with dlopen: no CUDA toolkit is
 * needed to build this), calls go on a stream of this program's, and results are read after the
 * stream is synchronised, against a reference computed here. Each mode prints "OK <mode> <rank>".
 * "host-driver": run against tests/nccl/host_libcuda.c (CI, no GPU), whose "GPU memory" is host
 * memory: the checks that need real GPU memory (ncclMemAlloc's, the host/GPU mix) are left out.
 *
 *   device_check collectives <dir> [host-driver]
 *                                   every collective on GPU buffers (types x ops, in and out of
 *                                   place, rooted ones at every root), a group of collectives,
 *                                   PreMulSum with a device and a host scalar, ncclMemAlloc (GPU
 *                                   memory) and ncclCommRegister on it, ncclCommCuDevice,
 *                                   ncclCommGetAsyncError, and a host/GPU mix refused
 *   device_check p2p <dir>          groups of ncclSend/ncclRecv on GPU buffers: a ring both ways and
 *                                   an all-to-all with uneven splits (zeros too), as torch's
 *                                   all_to_all_single
 *   device_check p2p-realloc <dir>  send/recv rings on buffers allocated per size and freed after it
 *                                   (a peer's new allocation at a freed one's addresses), with an
 *                                   all_reduce of a buffer kept throughout between sizes
 *   device_check nonblocking <dir>  a non-blocking communicator's all_reduce and send/recv ring on
 *                                   GPU buffers, three rounds: each call returns ncclSuccess or
 *                                   ncclInProgress and is polled to its end (the shim runs it on a
 *                                   kept thread, with the buffers' device current)
 *   device_check abort <dir>        rank 0 calls an all_reduce the others never join; ncclCommAbort
 *                                   from another thread ends it with an error, never a hang
 *   device_check async-error <dir>  (2+ ranks, short FORESTCC_TIMEOUT) rank 1's kernel is held
 *                                   behind a stream wait, so the others' time out on the GPU after
 *                                   their calls returned: rank 0's ncclCommGetAsyncError, polled
 *                                   (it never blocks), turns to that error
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#include "check_common.h"

/* ---- the CUDA driver, through dlopen ----------------------------------------------------------- */

typedef int CUresult;
typedef void* CUcontext;
typedef struct CUstream_st* CUstream;
typedef unsigned long long CUdeviceptr;

static struct {
  CUresult (*init)(unsigned);
  CUresult (*deviceGet)(int*, int);
  CUresult (*primaryCtxRetain)(CUcontext*, int);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*memAlloc)(CUdeviceptr*, size_t);
  CUresult (*memFree)(CUdeviceptr);
  CUresult (*memcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*memcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*streamCreate)(CUstream*, unsigned);
  CUresult (*streamSynchronize)(CUstream);
  CUresult (*pointerGetAttribute)(void*, int, CUdeviceptr);
  CUresult (*memHostAlloc)(void**, size_t, unsigned);
  CUresult (*memHostGetDevicePointer)(CUdeviceptr*, void*, unsigned);
  CUresult (*streamWaitValue32)(CUstream, CUdeviceptr, uint32_t, unsigned);
} cu;

#define CU(call)                                                                     \
  do {                                                                               \
    CUresult e_ = (call);                                                            \
    if (e_ != 0) {                                                                   \
      fprintf(stderr, "ERROR rank %d: %s returned CUDA error %d\n", rank, #call, e_); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static void* need(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (!f) {
    fprintf(stderr, "ERROR rank %d: libcuda.so.1 has no %s\n", rank, name);
    exit(1);
  }
  return f;
}

static CUstream stream;

/* Loads the driver and makes device 0's primary context current (as the CUDA runtime does), before
 * any communicator: the shim then records device 0 as the communicator's. */
static void startCuda(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    fprintf(stderr, "ERROR rank %d: cannot load libcuda.so.1: %s\n", rank, dlerror());
    exit(1);
  }
  *(void**)&cu.init = need(lib, "cuInit");
  *(void**)&cu.deviceGet = need(lib, "cuDeviceGet");
  *(void**)&cu.primaryCtxRetain = need(lib, "cuDevicePrimaryCtxRetain");
  *(void**)&cu.ctxSetCurrent = need(lib, "cuCtxSetCurrent");
  *(void**)&cu.memAlloc = need(lib, "cuMemAlloc_v2");
  *(void**)&cu.memFree = need(lib, "cuMemFree_v2");
  *(void**)&cu.memcpyHtoD = need(lib, "cuMemcpyHtoD_v2");
  *(void**)&cu.memcpyDtoH = need(lib, "cuMemcpyDtoH_v2");
  *(void**)&cu.streamCreate = need(lib, "cuStreamCreate");
  *(void**)&cu.streamSynchronize = need(lib, "cuStreamSynchronize");
  *(void**)&cu.pointerGetAttribute = need(lib, "cuPointerGetAttribute");
  *(void**)&cu.memHostAlloc = need(lib, "cuMemHostAlloc");
  *(void**)&cu.memHostGetDevicePointer = need(lib, "cuMemHostGetDevicePointer_v2");
  *(void**)&cu.streamWaitValue32 = need(lib, "cuStreamWaitValue32_v2");
  int device;
  CUcontext ctx;
  CU(cu.init(0));
  CU(cu.deviceGet(&device, 0));
  CU(cu.primaryCtxRetain(&ctx, device));
  CU(cu.ctxSetCurrent(ctx));
  CU(cu.streamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING: no implicit sync with the default stream */));
}

static void* gpuAlloc(size_t bytes) {
  CUdeviceptr p;
  CU(cu.memAlloc(&p, bytes ? bytes : 1));
  return (void*)(uintptr_t)p;
}
static void gpuFree(void* p) { CU(cu.memFree((CUdeviceptr)(uintptr_t)p)); }
static void toGpu(void* dst, const void* src, size_t bytes) {
  if (bytes) CU(cu.memcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, bytes));
}
static void fromGpu(void* dst, const void* src, size_t bytes) {
  if (bytes) CU(cu.memcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, bytes));
}
static void syncStream(void) { CU(cu.streamSynchronize(stream)); }

/* ---- values of the tested types, as doubles ---------------------------------------------------- */

static const ncclDataType_t TYPES[] = {ncclInt8, ncclInt32, ncclUint64, ncclFloat32, ncclFloat64};
static const char* TYPE_NAMES[] = {"int8", "int32", "uint64", "float32", "float64"};
#define NTYPES 5

static size_t sizeOf(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return 1;
    case ncclInt32: case ncclFloat32: return 4;
    default: return 8;
  }
}
static int isFloat(ncclDataType_t t) { return t == ncclFloat32 || t == ncclFloat64; }

static void setValue(ncclDataType_t t, void* p, size_t i, double v) {
  switch (t) {
    case ncclInt8: ((int8_t*)p)[i] = (int8_t)v; break;
    case ncclInt32: ((int32_t*)p)[i] = (int32_t)v; break;
    case ncclUint64: ((uint64_t*)p)[i] = (uint64_t)v; break;
    case ncclFloat32: ((float*)p)[i] = (float)v; break;
    default: ((double*)p)[i] = v; break;
  }
}
static double getValue(ncclDataType_t t, const void* p, size_t i) {
  switch (t) {
    case ncclInt8: return ((const int8_t*)p)[i];
    case ncclInt32: return ((const int32_t*)p)[i];
    case ncclUint64: return (double)((const uint64_t*)p)[i];
    case ncclFloat32: return ((const float*)p)[i];
    default: return ((const double*)p)[i];
  }
}

/* Rank r's element i: small enough that every sum and product of up to 4 ranks fits in int8. */
static double inputOf(ncclRedOp_t op, int r, size_t i) {
  return op == ncclProd ? 1 + (double)((i + (size_t)r) % 2) : (double)((r + 1) * (int)(1 + i % 7));
}

static double reduced(ncclRedOp_t op, ncclDataType_t t, size_t i) {
  double acc = inputOf(op, 0, i);
  for (int r = 1; r < nranks; ++r) {
    double v = inputOf(op, r, i);
    if (op == ncclSum || op == ncclAvg) acc += v;
    else if (op == ncclProd) acc *= v;
    else if (op == ncclMax) acc = v > acc ? v : acc;
    else acc = v < acc ? v : acc;
  }
  if (op == ncclAvg) acc = isFloat(t) ? acc / nranks : (double)((long long)acc / nranks); /* integers truncate */
  return acc;
}

static int close_(ncclDataType_t t, double got, double want) {
  if (!isFloat(t)) return got == want;
  double tol = (t == ncclFloat32 ? 1e-6 : 1e-12) * (want < 0 ? -want : want) + 1e-12;
  return got - want <= tol && want - got <= tol;
}

/* A GPU buffer of `count` elements filled by fill(i), and its host copy for checks. */
static void* gpuFilled(ncclDataType_t t, size_t count, double (*fill)(size_t i, void* arg), void* arg) {
  void* host = malloc(count * sizeOf(t) + 1);
  for (size_t i = 0; i < count; ++i) setValue(t, host, i, fill(i, arg));
  void* dev = gpuAlloc(count * sizeOf(t));
  toGpu(dev, host, count * sizeOf(t));
  free(host);
  return dev;
}

/* Reads `count` elements back (after the stream) and compares each with want(i). */
static void expectGpu(const char* what, ncclDataType_t t, const void* dev, size_t count,
                      double (*want)(size_t i, void* arg), void* arg) {
  syncStream();
  void* host = malloc(count * sizeOf(t) + 1);
  fromGpu(host, dev, count * sizeOf(t));
  for (size_t i = 0; i < count; ++i) {
    double got = getValue(t, host, i), w = want(i, arg);
    if (!close_(t, got, w)) {
      FAIL("%s: element %zu is %g, expected %g", what, i, got, w);
      break;
    }
  }
  free(host);
}

struct Ctx {
  ncclRedOp_t op;
  ncclDataType_t type;
  int r;        /* a rank */
  size_t count; /* per-rank block */
};

static double fillInput(size_t i, void* a) { struct Ctx* c = a; return inputOf(c->op, c->r, i); }
static double fillMinusOne(size_t i, void* a) { (void)i, (void)a; return -1; }
static double wantReduced(size_t i, void* a) { struct Ctx* c = a; return reduced(c->op, c->type, i); }
/* block b of an all_gather / gather output is rank b's input (Sum pattern) */
static double wantGathered(size_t i, void* a) { struct Ctx* c = a; return inputOf(ncclSum, (int)(i / c->count), i % c->count); }
/* reduce_scatter: this rank's block of the all-reduced vector */
static double wantScattered(size_t i, void* a) { struct Ctx* c = a; return reduced(ncclSum, c->type, c->r * c->count + i); }
/* all_to_all: rank r's element j*count+i is what rank j had at r*count+i (fits int8 up to 4 ranks) */
static double fillAllToAll(size_t i, void* a) { struct Ctx* c = a; return c->r * 20 + (double)(i % 17); }
static double wantAllToAll(size_t i, void* a) {
  struct Ctx* c = a;
  size_t from = i / c->count, k = i % c->count;
  return (double)from * 20 + (double)((c->r * c->count + k) % 17);
}
static double wantRootInput(size_t i, void* a) { struct Ctx* c = a; return inputOf(ncclSum, c->r, i); }
/* PreMulSum: sum over ranks of factor(r) * input(r), factor(r) = r + 2 */
static double wantPreMul(size_t i, void* a) {
  (void)a;
  double acc = 0;
  for (int r = 0; r < nranks; ++r) acc += (r + 2) * inputOf(ncclSum, r, i);
  return acc;
}

/* ---- collectives --------------------------------------------------------------------------------- */

static void checkAllReduce(ncclComm_t comm, ncclDataType_t t, const char* tname, ncclRedOp_t op, size_t count) {
  struct Ctx c = {op, t, rank, count};
  char what[128];
  void* in = gpuFilled(t, count, fillInput, &c);
  void* out = gpuFilled(t, count, fillMinusOne, &c);
  CHECK(ncclAllReduce(in, out, count, t, op, comm, stream));
  snprintf(what, sizeof what, "all_reduce %s op %d count %zu", tname, (int)op, count);
  expectGpu(what, t, out, count, wantReduced, &c);
  CHECK(ncclAllReduce(in, in, count, t, op, comm, stream)); /* in place */
  snprintf(what, sizeof what, "in-place all_reduce %s op %d count %zu", tname, (int)op, count);
  expectGpu(what, t, in, count, wantReduced, &c);
  gpuFree(in);
  gpuFree(out);
}

static void checkRooted(ncclComm_t comm, ncclDataType_t t, size_t count) {
  char what[128];
  for (int root = 0; root < nranks; ++root) {
    struct Ctx c = {ncclSum, t, rank, count}, rootCtx = {ncclSum, t, root, count};
    void* in = gpuFilled(t, count, fillInput, &c);
    void* out = gpuFilled(t, count * nranks, fillMinusOne, &c);
    /* reduce: only the root passes recvbuff (the others lend scratch) */
    CHECK(ncclReduce(in, rank == root ? out : NULL, count, t, ncclSum, root, comm, stream));
    if (rank == root) {
      snprintf(what, sizeof what, "reduce root %d", root);
      expectGpu(what, t, out, count, wantReduced, &c);
    }
    /* broadcast out of place, then in place (ncclBcast) */
    CHECK(ncclBroadcast(in, out, count, t, root, comm, stream));
    snprintf(what, sizeof what, "broadcast root %d", root);
    expectGpu(what, t, out, count, wantRootInput, &rootCtx);
    CHECK(ncclBcast(in, count, t, root, comm, stream));
    snprintf(what, sizeof what, "bcast root %d", root);
    expectGpu(what, t, in, count, wantRootInput, &rootCtx);
    /* gather and scatter: the root's buffers only */
    gpuFree(in);
    in = gpuFilled(t, count, fillInput, &c);
    CHECK(ncclGather(in, rank == root ? out : NULL, count, t, root, comm, stream));
    if (rank == root) {
      snprintf(what, sizeof what, "gather root %d", root);
      expectGpu(what, t, out, count * nranks, wantGathered, &c);
    }
    void* part = gpuFilled(t, count, fillMinusOne, &c);
    CHECK(ncclScatter(rank == root ? out : NULL, part, count, t, root, comm, stream));
    snprintf(what, sizeof what, "scatter root %d", root);
    expectGpu(what, t, part, count, wantRootInput, &c); /* block `rank` of the gathered = rank's input */
    gpuFree(part);
    gpuFree(in);
    gpuFree(out);
  }
}

static void checkUnrooted(ncclComm_t comm, ncclDataType_t t, size_t count) {
  struct Ctx c = {ncclSum, t, rank, count};
  void* in = gpuFilled(t, count, fillInput, &c);
  void* all = gpuFilled(t, count * nranks, fillMinusOne, &c);
  CHECK(ncclAllGather(in, all, count, t, comm, stream));
  expectGpu("all_gather", t, all, count * nranks, wantGathered, &c);
  /* reduce_scatter of an all-reduce pattern over count * nranks elements */
  struct Ctx big = {ncclSum, t, rank, count * nranks};
  void* rsIn = gpuFilled(t, count * nranks, fillInput, &big);
  void* rsOut = gpuFilled(t, count, fillMinusOne, &c);
  CHECK(ncclReduceScatter(rsIn, rsOut, count, t, ncclSum, comm, stream));
  expectGpu("reduce_scatter", t, rsOut, count, wantScattered, &c);
  void* a2aIn = gpuFilled(t, count * nranks, fillAllToAll, &c);
  CHECK(ncclAlltoAll(a2aIn, all, count, t, comm, stream));
  expectGpu("alltoall", t, all, count * nranks, wantAllToAll, &c);
  gpuFree(in);
  gpuFree(all);
  gpuFree(rsIn);
  gpuFree(rsOut);
  gpuFree(a2aIn);
}


static void checkPreMulSum(ncclComm_t comm, size_t count) {
  struct Ctx c = {ncclSum, ncclFloat32, rank, count};
  /* a scalar in GPU memory (read when the call runs: written after the operator is made) */
  void* scalar = gpuFilled(ncclFloat32, 1, fillMinusOne, &c);
  ncclRedOp_t op;
  CHECK(ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat32, ncclScalarDevice, comm));
  float f = (float)(rank + 2);
  toGpu(scalar, &f, sizeof f);
  void* in = gpuFilled(ncclFloat32, count, fillInput, &c);
  void* out = gpuFilled(ncclFloat32, count, fillMinusOne, &c);
  CHECK(ncclAllReduce(in, out, count, ncclFloat32, op, comm, stream));
  expectGpu("all_reduce PreMulSum (device scalar)", ncclFloat32, out, count, wantPreMul, &c);
  /* the rank that is not the root lends scratch on the GPU */
  CHECK(ncclReduce(in, rank == 0 ? out : NULL, count, ncclFloat32, op, 0, comm, stream));
  if (rank == 0) expectGpu("reduce PreMulSum (device scalar)", ncclFloat32, out, count, wantPreMul, &c);
  CHECK(ncclRedOpDestroy(op, comm));
  gpuFree(scalar);
  double h = rank + 2;
  CHECK(ncclRedOpCreatePreMulSum(&op, &h, ncclFloat64, ncclScalarHostImmediate, comm));
  c.type = ncclFloat64;
  void* in64 = gpuFilled(ncclFloat64, count, fillInput, &c);
  void* out64 = gpuFilled(ncclFloat64, count, fillMinusOne, &c);
  CHECK(ncclReduceScatter(in64, out64, count / nranks, ncclFloat64, op, comm, stream));
  syncStream();
  double* back = malloc(count * sizeof(double));
  fromGpu(back, out64, count / nranks * sizeof(double));
  for (size_t i = 0; i < count / nranks; ++i)
    if (back[i] != wantPreMul(rank * (count / nranks) + i, NULL)) {
      FAIL("reduce_scatter PreMulSum (host scalar): element %zu is %g", i, back[i]);
      break;
    }
  free(back);
  CHECK(ncclRedOpDestroy(op, comm));
  gpuFree(in);
  gpuFree(out);
  gpuFree(in64);
  gpuFree(out64);
}

/* Two all_reduces and a broadcast in one group: each runs, in call order. */
static void checkGroup(ncclComm_t comm, size_t count) {
  struct Ctx c = {ncclSum, ncclFloat32, rank, count}, maxCtx = {ncclMax, ncclInt32, rank, count};
  struct Ctx rootCtx = {ncclSum, ncclFloat32, 0, count};
  void* a = gpuFilled(ncclFloat32, count, fillInput, &c);
  void* b = gpuFilled(ncclInt32, count, fillInput, &maxCtx);
  void* d = gpuFilled(ncclFloat32, count, fillInput, &c);
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(a, a, count, ncclFloat32, ncclSum, comm, stream));
  CHECK(ncclAllReduce(b, b, count, ncclInt32, ncclMax, comm, stream));
  CHECK(ncclBroadcast(d, d, count, ncclFloat32, 0, comm, stream));
  CHECK(ncclGroupEnd());
  expectGpu("group: all_reduce sum", ncclFloat32, a, count, wantReduced, &c);
  expectGpu("group: all_reduce max", ncclInt32, b, count, wantReduced, &maxCtx);
  expectGpu("group: broadcast", ncclFloat32, d, count, wantRootInput, &rootCtx);
  gpuFree(a);
  gpuFree(b);
  gpuFree(d);
}

static void checkMemory(ncclComm_t comm, size_t count) {
  struct Ctx c = {ncclSum, ncclFloat32, rank, count};
  void* p = NULL;
  CHECK(ncclMemAlloc(&p, count * sizeof(float)));
  unsigned type = 0;
  CU(cu.pointerGetAttribute(&type, 2 /* MEMORY_TYPE */, (CUdeviceptr)(uintptr_t)p));
  if (type != 2 /* DEVICE */) FAIL("ncclMemAlloc returned memory of type %u, expected GPU memory (2)", type);
  float* host = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) host[i] = (float)inputOf(ncclSum, rank, i);
  toGpu(p, host, count * sizeof(float));
  void* handle = NULL;
  CHECK(ncclCommRegister(comm, p, count * sizeof(float), &handle));
  CHECK(ncclAllReduce(p, p, count, ncclFloat32, ncclSum, comm, stream));
  expectGpu("all_reduce on ncclMemAlloc memory", ncclFloat32, p, count, wantReduced, &c);
  CHECK(ncclCommDeregister(comm, handle));
  CHECK(ncclMemFree(p));
  free(host);
}

static void modeCollectives(const char* dir, int realDriver) {
  startCuda();
  ncclComm_t comm = worldComm(dir);
  int device = -1;
  CHECK(ncclCommCuDevice(comm, &device));
  if (device != 0) FAIL("ncclCommCuDevice: %d, expected device 0 (the rank is %d)", device, rank);
  static const ncclRedOp_t OPS[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  static const size_t COUNTS[] = {1, 7, 1000};
  for (int t = 0; t < NTYPES; ++t)
    for (int o = 0; o < 5; ++o)
      for (int k = 0; k < 3; ++k) checkAllReduce(comm, TYPES[t], TYPE_NAMES[t], OPS[o], COUNTS[k]);
  checkAllReduce(comm, ncclFloat32, "float32", ncclSum, (size_t)1 << 20);
  for (int t = 0; t < NTYPES; t += 3) {
    checkRooted(comm, TYPES[t], 13);
    checkUnrooted(comm, TYPES[t], 13);
  }
  checkUnrooted(comm, ncclFloat32, 1 << 16);
  checkPreMulSum(comm, 12);
  checkGroup(comm, 257);
  if (realDriver) {
    checkMemory(comm, 4096);
    /* a call with one buffer on the GPU and one on the host: refused on every rank, nothing run */
    float host = 1;
    void* gpu = gpuAlloc(sizeof(float));
    EXPECT_ERROR(ncclAllReduce(gpu, &host, 1, ncclFloat32, ncclSum, comm, stream), ncclInvalidUsage,
                 "sendbuff is GPU memory (device 0) but recvbuff is host memory");
    gpuFree(gpu);
  }
  ncclResult_t async = ncclInProgress;
  syncStream();
  CHECK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) FAIL("ncclCommGetAsyncError after good calls: %d (%s)", async, ncclGetLastError(comm));
  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
}

/* ---- send / recv --------------------------------------------------------------------------------- */

static double p2pValue(int from, int to, size_t i) { return from * 1e6 + to * 1e4 + (double)i; }

static void modeP2p(const char* dir) {
  startCuda();
  ncclComm_t comm = worldComm(dir);
  /* a ring both ways: one group, two messages */
  size_t count = 1000;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  double* host = malloc(count * sizeof(double));
  for (size_t i = 0; i < count; ++i) host[i] = p2pValue(rank, -1, i);
  void* src = gpuAlloc(count * sizeof(double));
  toGpu(src, host, count * sizeof(double));
  void* fromPrev = gpuAlloc(count * sizeof(double));
  void* fromNext = gpuAlloc(count * sizeof(double));
  CHECK(ncclGroupStart());
  CHECK(ncclSend(src, count, ncclFloat64, next, comm, stream));
  CHECK(ncclSend(src, count, ncclFloat64, prev, comm, stream));
  CHECK(ncclRecv(fromPrev, count, ncclFloat64, prev, comm, stream));
  CHECK(ncclRecv(fromNext, count, ncclFloat64, next, comm, stream));
  CHECK(ncclGroupEnd());
  syncStream();
  fromGpu(host, fromPrev, count * sizeof(double));
  for (size_t i = 0; i < count; ++i)
    if (host[i] != p2pValue(prev, -1, i)) {
      FAIL("ring: element %zu from rank %d is %g", i, prev, host[i]);
      break;
    }
  fromGpu(host, fromNext, count * sizeof(double));
  for (size_t i = 0; i < count; ++i)
    if (host[i] != p2pValue(next, -1, i)) {
      FAIL("ring: element %zu from rank %d is %g", i, next, host[i]);
      break;
    }
  /* all-to-all with uneven splits: rank f sends (f + t) % 3 * 100 elements to rank t (zeros too) */
  size_t sendOff[64], recvOff[64], sendTotal = 0, recvTotal = 0;
  for (int p = 0; p < nranks; ++p) {
    sendOff[p] = sendTotal;
    sendTotal += (size_t)((rank + p) % 3) * 100;
    recvOff[p] = recvTotal;
    recvTotal += (size_t)((p + rank) % 3) * 100;
  }
  double* sendHost = malloc((sendTotal + 1) * sizeof(double));
  double* recvHost = malloc((recvTotal + 1) * sizeof(double));
  for (int p = 0; p < nranks; ++p)
    for (size_t i = 0; i < (size_t)((rank + p) % 3) * 100; ++i) sendHost[sendOff[p] + i] = p2pValue(rank, p, i);
  void* sendBuf = gpuAlloc((sendTotal + 1) * sizeof(double));
  void* recvBuf = gpuAlloc((recvTotal + 1) * sizeof(double));
  toGpu(sendBuf, sendHost, sendTotal * sizeof(double));
  CHECK(ncclGroupStart());
  for (int p = 0; p < nranks; ++p)
    CHECK(ncclSend((double*)sendBuf + sendOff[p], (size_t)((rank + p) % 3) * 100, ncclFloat64, p, comm, stream));
  for (int p = 0; p < nranks; ++p)
    CHECK(ncclRecv((double*)recvBuf + recvOff[p], (size_t)((p + rank) % 3) * 100, ncclFloat64, p, comm, stream));
  CHECK(ncclGroupEnd());
  syncStream();
  fromGpu(recvHost, recvBuf, recvTotal * sizeof(double));
  for (int p = 0; p < nranks; ++p)
    for (size_t i = 0; i < (size_t)((p + rank) % 3) * 100; ++i)
      if (recvHost[recvOff[p] + i] != p2pValue(p, rank, i)) {
        FAIL("all-to-all: element %zu from rank %d is %g", i, p, recvHost[recvOff[p] + i]);
        p = nranks;
        break;
      }
  free(host);
  free(sendHost);
  free(recvHost);
  gpuFree(src);
  gpuFree(fromPrev);
  gpuFree(fromNext);
  gpuFree(sendBuf);
  gpuFree(recvBuf);
  CHECK(ncclCommDestroy(comm));
}

/* perf/nccl's old pattern: buffers allocated per size and freed after it, a ring of send/recv on
 * them and an all_reduce of a buffer kept throughout (the runner's imports beside the
 * point-to-point ones). A peer's new allocation can take a freed one's addresses, whose import
 * here is then stale. */
static void modeP2pRealloc(const char* dir) {
  startCuda();
  ncclComm_t comm = worldComm(dir);
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  static const size_t counts[] = {2, 64, 2048, 65536, 3, 100};
  void* kept = NULL;
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
    size_t count = counts[k];
    double* host = malloc(count * sizeof(double));
    for (size_t i = 0; i < count; ++i) host[i] = p2pValue(rank, (int)k, i);
    void* src = gpuAlloc((count + 1) * sizeof(double));
    void* dst = gpuAlloc((count + 1) * sizeof(double));
    toGpu(src, host, count * sizeof(double));
    for (int round = 0; round < 2; ++round) {
      CHECK(ncclGroupStart());
      CHECK(ncclSend(src, count, ncclFloat64, next, comm, stream));
      CHECK(ncclRecv(dst, count, ncclFloat64, prev, comm, stream));
      CHECK(ncclGroupEnd());
    }
    syncStream();
    fromGpu(host, dst, count * sizeof(double));
    for (size_t i = 0; i < count; ++i)
      if (host[i] != p2pValue(prev, (int)k, i)) {
        FAIL("size %zu: element %zu from rank %d is %g", count, i, prev, host[i]);
        break;
      }
    if (!kept) kept = gpuAlloc(2 * sizeof(double)); /* after the first size's buffers, as perf's */
    double one[2] = {1.0, (double)k};
    toGpu(kept, one, sizeof one);
    CHECK(ncclAllReduce(kept, kept, 2, ncclFloat64, ncclSum, comm, stream));
    syncStream();
    fromGpu(one, kept, sizeof one);
    if (one[0] != nranks || one[1] != (double)k * nranks)
      FAIL("size %zu: the all_reduce gave %g, %g, expected %d, %g", count, one[0], one[1], nranks, (double)k * nranks);
    free(host);
    gpuFree(src);
    gpuFree(dst);
  }
  gpuFree(kept);
  CHECK(ncclCommDestroy(comm));
}

/* ---- abort and asynchronous errors --------------------------------------------------------------- */

static ncclComm_t abortComm;
static void* abortLater(void* arg) {
  (void)arg;
  usleep(300 * 1000); /* usually while rank 0 waits for its peers; before is also fine */
  ncclCommAbort(abortComm);
  return NULL;
}

static void pollOk(ncclComm_t comm, ncclResult_t r, const char* what) {
  if (r != ncclSuccess && r != ncclInProgress) FAIL("%s returned %d: %s", what, r, ncclGetLastError(comm));
  const ncclResult_t state = pollToEnd(comm, what);
  if (state != ncclSuccess) FAIL("%s ended in %d: %s", what, state, ncclGetLastError(comm));
}

static void modeNonBlocking(const char* dir) {
  startCuda();
  ncclUniqueId id;
  shareId(dir, "nonblocking.id", &id, rank == 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = NULL;
  pollOk(comm, ncclCommInitRankConfig(&comm, nranks, id, rank, &config), "ncclCommInitRankConfig");
  const size_t count = 1000;
  float* host = malloc(count * sizeof(float));
  float* from = malloc(count * sizeof(float));
  void* x = gpuAlloc(count * sizeof(float));
  void* in = gpuAlloc(count * sizeof(float));
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < count; ++i) host[i] = (float)(rank + 1) * (float)(i % 7 + round);
    toGpu(x, host, count * sizeof(float));
    pollOk(comm, ncclAllReduce(x, x, count, ncclFloat32, ncclSum, comm, stream), "ncclAllReduce");
    syncStream();
    fromGpu(host, x, count * sizeof(float));
    const float ranks = nranks * (nranks + 1) / 2.0f;
    for (size_t i = 0; i < count; ++i)
      if (host[i] != ranks * (float)(i % 7 + round)) {
        FAIL("round %d: all_reduce[%zu] is %g, want %g", round, i, host[i], ranks * (float)(i % 7 + round));
        break;
      }
    /* a ring: x (the sum) goes to the next rank, whose sum it is too */
    CHECK(ncclGroupStart());
    CHECK(ncclSend(x, count, ncclFloat32, next, comm, stream));
    CHECK(ncclRecv(in, count, ncclFloat32, prev, comm, stream));
    pollOk(comm, ncclGroupEnd(), "the send/recv group");
    syncStream();
    fromGpu(from, in, count * sizeof(float));
    if (memcmp(from, host, count * sizeof(float)) != 0) FAIL("round %d: the ring's message differs from the sum", round);
  }
  gpuFree(x);
  gpuFree(in);
  free(host);
  free(from);
  CHECK(ncclCommDestroy(comm));
}

static void modeAbort(const char* dir) {
  startCuda();
  abortComm = worldComm(dir);
  if (rank == 0) {
    void* x = gpuAlloc(64 * sizeof(float));
    pthread_t t;
    pthread_create(&t, NULL, abortLater, NULL);
    /* the peers never call: only the abort can end this */
    ncclResult_t r = ncclAllReduce(x, x, 64, ncclFloat32, ncclSum, abortComm, stream);
    pthread_join(t, NULL);
    /* the host part of a call waits until every peer entered it, so it cannot have succeeded */
    if (r == ncclSuccess) FAIL("an all_reduce no peer joined returned success before the abort");
    else printf("ABORTED rank 0: %d %s\n", r, ncclGetLastError(NULL));
    touch(dir, "aborted");
    gpuFree(x);
  } else {
    waitFor(dir, "aborted");
    CHECK(ncclCommAbort(abortComm));
  }
}

static void modeAsyncError(const char* dir) {
  startCuda();
  ncclComm_t comm = worldComm(dir);
  void* x = gpuAlloc(1024 * sizeof(float));
  volatile uint32_t* gate = NULL;
  CUdeviceptr gateOnGpu = 0;
  if (rank == 1) {
    /* the stream waits for a word this rank writes only after rank 0 saw its error, so rank 1's
     * kernel cannot run in time and rank 0's waits for it on the GPU until FORESTCC_TIMEOUT */
    CU(cu.memHostAlloc((void**)&gate, sizeof(uint32_t), 0x1 | 0x2 /* PORTABLE | DEVICEMAP */));
    *gate = 0;
    CU(cu.memHostGetDevicePointer(&gateOnGpu, (void*)gate, 0));
    CU(cu.streamWaitValue32(stream, gateOnGpu, 1, 0x0 /* CU_STREAM_WAIT_VALUE_GEQ */));
  }
  CHECK(ncclAllReduce(x, x, 1024, ncclFloat32, ncclSum, comm, stream)); /* every rank: the host part waits for all */
  if (rank == 0) {
    ncclResult_t async = ncclSuccess;
    for (int i = 0; i < 600 * 100 && async == ncclSuccess; ++i) { /* polled: up to 10 min */
      CHECK(ncclCommGetAsyncError(comm, &async));
      if (async == ncclSuccess) usleep(10 * 1000);
    }
    if (async == ncclSuccess || async == ncclInProgress)
      FAIL("ncclCommGetAsyncError stayed %d while the all_reduce could not finish", async);
    else
      printf("ASYNC-ERROR rank 0: %d %s\n", async, ncclGetLastError(comm));
    touch(dir, "seen");
  } else {
    waitFor(dir, "seen");
  }
  if (gate) *gate = 1; /* rank 1's kernel runs now, and fails too (rank 0's is gone) */
  /* Rank 1's kernel still reads and signals rank 0's memory through CUDA IPC until it fails: rank 0
   * keeps its communicator (and its process) until every other rank's abort returned, which
   * waits for that rank's kernels. */
  if (rank != 0) {
    CHECK(ncclCommAbort(comm));
    char name[64];
    snprintf(name, sizeof name, "aborted-%d", rank);
    touch(dir, name);
  } else {
    for (int r = 1; r < nranks; ++r) {
      char name[64];
      snprintf(name, sizeof name, "aborted-%d", r);
      waitFor(dir, name);
    }
    CHECK(ncclCommAbort(comm));
  }
}

int main(int argc, char** argv) {
  const char* mode = startProgram(argc, argv);
  if (!strcmp(mode, "collectives")) modeCollectives(argv[2], !(argc > 3 && !strcmp(argv[3], "host-driver")));
  else if (!strcmp(mode, "p2p")) modeP2p(argv[2]);
  else if (!strcmp(mode, "p2p-realloc")) modeP2pRealloc(argv[2]);
  else if (!strcmp(mode, "abort")) modeAbort(argv[2]);
  else if (!strcmp(mode, "nonblocking")) modeNonBlocking(argv[2]);
  else if (!strcmp(mode, "async-error")) modeAsyncError(argv[2]);
  else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  if (failures) return 1;
  printf("OK %s %d\n", mode, rank);
  return 0;
}
