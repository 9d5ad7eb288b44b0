/* Flags, communicator, timing, checking and the table of the NCCL-API benchmarks (perf_common.h).
 * Ranks and size come from forestcc-run, Open MPI, MPICH or Slurm; rank 0's ncclUniqueId reaches
 * the others through a file (NCCL_PERF_ID_FILE, default /tmp/nccl-perf-<job>.id), the one thing an
 * NCCL program needs from outside NCCL. Only float32 data: the figures are about moving bytes. */
#define _GNU_SOURCE
#include "perf_common.h"

#include <math.h>
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
  double t = 0;
  if (iters > 0) {
    double start = now();
    for (int i = 0; i < iters; ++i) CHECK(c->run(send, recv, count, inPlace, root, rank, n, comm));
    t = (now() - start) / iters * 1e6;
  }
  CHECK(ncclAllReduce(&t, &t, 1, ncclFloat64, ncclSum, comm, NULL));
  col.time = t / n;
  if (check) {
    /* fresh inputs, a cleared output, one operation, then count what differs */
    for (size_t i = 0; i < sc; ++i) send[i] = (float)perfInput(rank, i);
    for (size_t i = 0; i < rc; ++i) recv[i] = -1.0f;
    if (inPlace && c->inPlace) {
      /* the in-place forms read their input from the receive buffer where NCCL puts it */
      CHECK(c->run(send, recv, count, 2, root, rank, n, comm));
    } else {
      CHECK(c->run(send, recv, count, inPlace, root, rank, n, comm));
    }
    long wrong = 0;
    for (size_t i = 0; i < rc; ++i) {
      double want = c->expected(i, count, root, rank, n);
      if (!isnan(want) && recv[i] != (float)want) ++wrong;
    }
    double w = (double)wrong;
    CHECK(ncclAllReduce(&w, &w, 1, ncclFloat64, ncclSum, comm, NULL));
    col.wrong = (long)w;
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
  int iters = 20, warmup = 5, check = 1, root = 0, opt;
  while ((opt = getopt(argc, argv, "b:e:i:f:n:w:c:r:d:o:h")) != -1) {
    switch (opt) {
      case 'b': minBytes = parseSize(optarg); break;
      case 'e': maxBytes = parseSize(optarg); break;
      case 'i': step = parseSize(optarg); factor = 0; break;
      case 'f': factor = atof(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'w': warmup = atoi(optarg); break;
      case 'c': check = atoi(optarg); break;
      case 'r': root = atoi(optarg); break;
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
                " [-r root]\n  run under forestcc-run, mpirun or srun; see perf/nccl/README.md\n", argv[0]);
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
  ncclComm_t comm = joinJob(rank, n);
  int version;
  CHECK(ncclGetVersion(&version));
  const double bus = c->busFactor(n);
  if (rank == 0) {
    printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d "
           "agg iters: 1 validation: %d\n", minBytes, maxBytes, factor ? factor : (double)step,
           factor ? "factor" : "bytes", warmup, iters, check);
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
  for (size_t bytes = minBytes; bytes <= maxBytes;) {
    size_t count = bytes / sizeof(float) / (c->sendCount(1, n) > c->recvCount(1, n) ? c->sendCount(1, n) : c->recvCount(1, n));
    size_t total = count * (c->sendCount(1, n) > c->recvCount(1, n) ? c->sendCount(1, n) : c->recvCount(1, n));
    float* send = calloc(c->sendCount(count, n) + 1, sizeof(float));
    float* recv = calloc(c->recvCount(count, n) + 1, sizeof(float));
    for (size_t i = 0; i < c->sendCount(count, n); ++i) send[i] = (float)perfInput(rank, i);
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
    free(send);
    free(recv);
    size_t next = factor > 1 ? (size_t)(bytes * factor) : bytes + step;
    if (next <= bytes) break;
    bytes = next;
  }
  if (rank == 0) {
    printf("# Out of bounds values : 0 OK\n");
    printf("# Avg bus bandwidth    : %g \n", rows ? busSum / rows : 0.0);
    printf("#\n# Collective test concluded: %s\n", c->name);
  }
  CHECK(ncclCommFinalize(comm));
  CHECK(ncclCommDestroy(comm));
  return wrongTotal ? 1 : 0;
}
