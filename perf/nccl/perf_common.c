/* Flags, communicator, timing, checking and the table of the NCCL-API benchmarks (perf_common.h).
 * Ranks and size come from forestcc-run, Open MPI, MPICH or Slurm; rank 0's ncclUniqueId reaches
 * the others through a file (NCCL_PERF_ID_FILE, default /tmp/nccl-perf-<job>.id), the one thing an
 * NCCL program needs from outside NCCL. Only float32 data: the figures are about moving bytes.
 * With -M gpu the buffers are GPU memory on device (local rank % devices), the calls go on a stream
 * of the benchmark's, and the clock stops once that stream has finished (calls on GPU memory return
 * once enqueued); the CUDA driver is loaded with dlopen, so no CUDA toolkit is needed to build. */
#define _GNU_SOURCE
#include "perf_common.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    ncclResult_t r_ = (call);                                                                         \
    if (r_ != ncclSuccess) {                                                                          \
      fprintf(stderr, "%s:%d %s failed: %s: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_), \
              ncclGetLastError(NULL));                                                                \
      exit(1);                                                                                        \
    }                                                                                                 \
  } while (0)

static const char* envFirst(const char* const* names) {
  for (; *names; ++names) {
    const char* v = getenv(*names);
    if (v && *v) return v;
  }
  return NULL;
}

double perfInput(int rank, size_t i) { return (double)((rank + i) % 4); }

/* ---- GPU memory (-M gpu), through the CUDA driver ----------------------------------------------- */

typedef unsigned long long DevicePtr; /* CUdeviceptr */
static struct {
  int on;     /* -M gpu */
  int device; /* the CUDA device of this rank */
  cudaStream_t stream;
  int (*memAlloc)(DevicePtr*, size_t);
  int (*memFree)(DevicePtr);
  int (*memcpy)(DevicePtr, DevicePtr, size_t); /* any direction (unified addressing) */
  int (*streamSynchronize)(cudaStream_t);
} gpu;

#define CU(call)                                                                    \
  do {                                                                              \
    int e_ = (call);                                                                \
    if (e_ != 0) {                                                                  \
      fprintf(stderr, "%s:%d %s failed: CUDA error %d\n", __FILE__, __LINE__, #call, e_); \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

static void* cudaFunction(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (!f) {
    fprintf(stderr, "-M gpu: libcuda.so.1 has no %s\n", name);
    exit(1);
  }
  return f;
}

/* Makes device (localRank % devices) current, as the CUDA runtime would, before the communicator
 * is made (NCCL and forestcc's shim take the device current then). */
static void startGpu(int localRank) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    fprintf(stderr, "-M gpu: cannot load the CUDA driver (libcuda.so.1): %s\n", dlerror());
    exit(1);
  }
  int (*init)(unsigned) = (int (*)(unsigned))cudaFunction(lib, "cuInit");
  int (*count)(int*) = (int (*)(int*))cudaFunction(lib, "cuDeviceGetCount");
  int (*retain)(void**, int) = (int (*)(void**, int))cudaFunction(lib, "cuDevicePrimaryCtxRetain");
  int (*setCurrent)(void*) = (int (*)(void*))cudaFunction(lib, "cuCtxSetCurrent");
  int (*streamCreate)(cudaStream_t*, unsigned) = (int (*)(cudaStream_t*, unsigned))cudaFunction(lib, "cuStreamCreate");
  *(void**)&gpu.memAlloc = cudaFunction(lib, "cuMemAlloc_v2");
  *(void**)&gpu.memFree = cudaFunction(lib, "cuMemFree_v2");
  *(void**)&gpu.memcpy = cudaFunction(lib, "cuMemcpy");
  *(void**)&gpu.streamSynchronize = cudaFunction(lib, "cuStreamSynchronize");
  int devices = 0;
  void* ctx;
  CU(init(0));
  CU(count(&devices));
  if (devices < 1) {
    fprintf(stderr, "-M gpu: no CUDA device is visible\n");
    exit(1);
  }
  gpu.on = 1;
  gpu.device = localRank % devices;
  CU(retain(&ctx, gpu.device));
  CU(setCurrent(ctx));
  CU(streamCreate(&gpu.stream, 1 /* non-blocking */));
}

cudaStream_t perfStream(void) { return gpu.on ? gpu.stream : NULL; }

void perfCopy(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  if (!gpu.on) {
    memcpy(dst, src, bytes);
    return;
  }
  CU(gpu.streamSynchronize(gpu.stream));
  CU(gpu.memcpy((DevicePtr)(uintptr_t)dst, (DevicePtr)(uintptr_t)src, bytes));
}

static void perfSync(void) {
  if (gpu.on) CU(gpu.streamSynchronize(gpu.stream));
}

/* A buffer of the benchmark's memory, and its release. */
static float* perfAlloc(size_t elements) {
  if (!gpu.on) return calloc(elements, sizeof(float));
  DevicePtr p;
  CU(gpu.memAlloc(&p, elements * sizeof(float)));
  return (float*)(uintptr_t)p;
}
static void perfFree(float* p) {
  if (gpu.on) CU(gpu.memFree((DevicePtr)(uintptr_t)p));
  else free(p);
}

/* The sum of `v` over ranks, in the benchmark's memory (a real NCCL takes GPU memory only). */
static double sumOverRanks(double v, ncclComm_t comm) {
  static double* buffer;
  if (!buffer) buffer = (double*)perfAlloc(2);
  perfCopy(buffer, &v, sizeof v);
  CHECK(ncclAllReduce(buffer, buffer, 1, ncclFloat64, ncclSum, comm, perfStream()));
  perfCopy(&v, buffer, sizeof v);
  return v;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static size_t parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return (size_t)v;
}

static ncclComm_t joinJob(int rank, int nranks) {
  static const char* const jobVars[] = {"FORESTCC_JOB_ID", "OMPI_COMM_WORLD_NODE_RANK", "SLURM_JOB_ID", NULL};
  char path[1024];
  const char* file = getenv("NCCL_PERF_ID_FILE");
  const char* job = envFirst(jobVars);
  if (file) snprintf(path, sizeof path, "%s", file);
  else snprintf(path, sizeof path, "/tmp/nccl-perf-%s.id", job ? job : "local");
  ncclUniqueId id;
  if (rank == 0) {
    char tmp[1100];
    CHECK(ncclGetUniqueId(&id));
    snprintf(tmp, sizeof tmp, "%s.%d", path, getpid());
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) || rename(tmp, path)) {
      perror(path);
      exit(1);
    }
  } else {
    for (int tries = 0;; ++tries) {
      FILE* f = fopen(path, "rb");
      if (f && fread(&id, sizeof id, 1, f) == 1) {
        fclose(f);
        break;
      }
      if (f) fclose(f);
      if (tries > 300000) {
        fprintf(stderr, "rank %d: no unique id in %s\n", rank, path);
        exit(1);
      }
      usleep(1000);
    }
  }
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, nranks, id, rank));
  if (rank == 0) unlink(path); /* every rank has joined: the id is no longer needed */
  return comm;
}

typedef struct {
  double time;  /* microseconds per operation, averaged over ranks */
  long wrong;   /* summed over ranks; -1: not checked */
} Column;

static Column measure(const PerfCollective* c, float* send, float* recv, size_t count, int inPlace, int root,
                      int rank, int n, ncclComm_t comm, int warmup, int iters, int check) {
  Column col = {0, -1};
  const size_t sc = c->sendCount(count, n), rc = c->recvCount(count, n);
  for (int i = 0; i < warmup; ++i) CHECK(c->run(send, recv, count, inPlace, root, rank, n, comm));
  perfSync();
  double t = 0;
  if (iters > 0) {
    double start = now();
    for (int i = 0; i < iters; ++i) CHECK(c->run(send, recv, count, inPlace, root, rank, n, comm));
    perfSync(); /* on GPU memory the calls returned once enqueued */
    t = (now() - start) / iters * 1e6;
  }
  col.time = sumOverRanks(t, comm) / n;
  if (check) {
    /* fresh inputs, a cleared output, one operation, then count what differs */
    float* hostSend = malloc((sc + 1) * sizeof(float));
    float* hostRecv = malloc((rc + 1) * sizeof(float));
    for (size_t i = 0; i < sc; ++i) hostSend[i] = (float)perfInput(rank, i);
    for (size_t i = 0; i < rc; ++i) hostRecv[i] = -1.0f;
    perfCopy(send, hostSend, sc * sizeof(float));
    perfCopy(recv, hostRecv, rc * sizeof(float));
    if (inPlace && c->inPlace) {
      /* the in-place forms read their input from the receive buffer where NCCL puts it */
      CHECK(c->run(send, recv, count, 2, root, rank, n, comm));
    } else {
      CHECK(c->run(send, recv, count, inPlace, root, rank, n, comm));
    }
    perfCopy(hostRecv, recv, rc * sizeof(float));
    long wrong = 0;
    for (size_t i = 0; i < rc; ++i) {
      double want = c->expected(i, count, root, rank, n);
      if (!isnan(want) && hostRecv[i] != (float)want) ++wrong;
    }
    col.wrong = (long)sumOverRanks((double)wrong, comm);
    free(hostSend);
    free(hostRecv);
  }
  return col;
}

static void printColumn(Column c, double bytes, double factor, int valid) {
  if (!valid) {
    printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  double algbw = c.time > 0 ? bytes / (c.time * 1e-6) / 1e9 : 0;
  printf("  %7.2f  %6.2f  %6.2f", c.time, algbw, algbw * factor);
  if (c.wrong < 0) printf("  %6s", "N/A");
  else printf("  %6ld", c.wrong);
}

int perfMain(int argc, char** argv, const PerfCollective* c) {
  static const char* const rankVars[] = {"FORESTCC_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
  static const char* const sizeVars[] = {"FORESTCC_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL};
  size_t minBytes = 32 << 20, maxBytes = 32 << 20, step = 1 << 20;
  double factor = 0;
  int iters = 20, warmup = 5, check = 1, root = 0, onGpu = 0, opt;
  while ((opt = getopt(argc, argv, "b:e:i:f:n:w:c:r:d:o:M:h")) != -1) {
    switch (opt) {
      case 'b': minBytes = parseSize(optarg); break;
      case 'e': maxBytes = parseSize(optarg); break;
      case 'i': step = parseSize(optarg); factor = 0; break;
      case 'f': factor = atof(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      case 'c': check = atoi(optarg); break;
      case 'r': root = atoi(optarg); break;
      case 'M':
        if (strcmp(optarg, "gpu") && strcmp(optarg, "host")) {
          fprintf(stderr, "%s: -M takes gpu or host, not %s\n", argv[0], optarg);
          return 2;
        }
        onGpu = !strcmp(optarg, "gpu");
        break;
      case 'd':
        if (strcmp(optarg, "float")) {
          fprintf(stderr, "%s: only -d float is measured here (forestcc's tests check every type)\n", argv[0]);
          return 2;
        }
        break;
      case 'o':
        if (strcmp(optarg, "sum")) {
          fprintf(stderr, "%s: only -o sum is measured here\n", argv[0]);
          return 2;
        }
        break;
      default:
        fprintf(stderr,
                "usage: %s [-b minbytes] [-e maxbytes] [-f factor | -i step] [-n iters] [-w warmup] [-c check]"
                " [-r root] [-M host|gpu]\n  run under forestcc-run, mpirun or srun; see perf/nccl/README.md\n", argv[0]);
        return opt == 'h' ? 0 : 2;
    }
  }
  const char* r = envFirst(rankVars);
  const char* s = envFirst(sizeVars);
  const int rank = r ? atoi(r) : 0, n = s ? atoi(s) : 1;
  if (root < 0 || root >= n) {
    fprintf(stderr, "%s: root %d is not a rank (0..%d)\n", argv[0], root, n - 1);
    return 2;
  }
  if (onGpu) {
    static const char* const localVars[] = {"FORESTCC_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                            "SLURM_LOCALID", NULL};
    const char* local = envFirst(localVars);
    startGpu(local ? atoi(local) : 0);
  }
  ncclComm_t comm = joinJob(rank, n);
  int version;
  CHECK(ncclGetVersion(&version));
  const double bus = c->busFactor(n);
  if (rank == 0) {
    printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d "
           "agg iters: 1 validation: %d\n", minBytes, maxBytes, factor ? factor : (double)step,
           factor ? "factor" : "bytes", warmup, iters, check);
    if (gpu.on)
      printf("#\n# Using devices\n#  NCCL version code %d, %d ranks on GPU memory (rank 0 on CUDA device %d)\n#\n",
             version, n, gpu.device);
    else
      printf("#\n# Using devices\n#  NCCL version code %d, %d ranks on host memory\n#\n", version, n);
    printf("#%78s%35s\n", "out-of-place", "in-place");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
           "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "",
           "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  double busSum = 0;
  int rows = 0;
  long wrongTotal = 0;
  /* One send and one receive buffer for every size, as nccl-tests allocates them (of the largest
   * size, once): a size's call uses their beginning. Memory freed and allocated again between
   * sizes would time the allocator and the peers' re-opening of it (CUDA IPC), not the call. */
  const size_t per = c->sendCount(1, n) > c->recvCount(1, n) ? c->sendCount(1, n) : c->recvCount(1, n);
  size_t maxSend = 0, maxRecv = 0;
  for (size_t bytes = minBytes; bytes <= maxBytes;) {
    const size_t count = bytes / sizeof(float) / per;
    if (c->sendCount(count, n) > maxSend) maxSend = c->sendCount(count, n);
    if (c->recvCount(count, n) > maxRecv) maxRecv = c->recvCount(count, n);
    size_t next = factor > 1 ? (size_t)(bytes * factor) : bytes + step;
    if (next <= bytes) break;
    bytes = next;
  }
  float* send = perfAlloc(maxSend + 1);
  float* recv = perfAlloc(maxRecv + 1);
  for (size_t bytes = minBytes; bytes <= maxBytes;) {
    size_t count = bytes / sizeof(float) / per;
    size_t total = count * per;
    float* input = calloc(c->sendCount(count, n) + 1, sizeof(float));
    for (size_t i = 0; i < c->sendCount(count, n); ++i) input[i] = (float)perfInput(rank, i);
    perfCopy(send, input, c->sendCount(count, n) * sizeof(float));
    free(input);
    Column out = measure(c, send, recv, count, 0, root, rank, n, comm, warmup, iters, check);
    Column in = {0, -1};
    if (c->inPlace) in = measure(c, send, recv, count, 1, root, rank, n, comm, warmup, iters, check);
    const double sizeBytes = (double)total * sizeof(float);
    if (rank == 0) {
      printf(" %12zu  %12zu  %8s  %6s  %6d", (size_t)sizeBytes, total, "float", c->reduces ? "sum" : "none",
             c->rooted ? root : -1);
      printColumn(out, sizeBytes, bus, 1);
      printColumn(in, sizeBytes, bus, c->inPlace);
      printf("\n");
      fflush(stdout);
    }
    double algOut = out.time > 0 ? sizeBytes / (out.time * 1e-6) / 1e9 : 0;
    double algIn = in.time > 0 ? sizeBytes / (in.time * 1e-6) / 1e9 : 0;
    busSum += algOut * bus + (c->inPlace ? algIn * bus : 0);
    rows += c->inPlace ? 2 : 1;
    wrongTotal += (out.wrong > 0 ? out.wrong : 0) + (in.wrong > 0 ? in.wrong : 0);
    size_t next = factor > 1 ? (size_t)(bytes * factor) : bytes + step;
    if (next <= bytes) break;
    bytes = next;
  }
  perfFree(send);
  perfFree(recv);
  if (rank == 0) {
    printf("# Out of bounds values : 0 OK\n");
    printf("# Avg bus bandwidth    : %g \n", rows ? busSum / rows : 0.0);
    printf("#\n# Collective test concluded: %s\n", c->name);
  }
  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
  return wrongTotal ? 1 : 0;
}
