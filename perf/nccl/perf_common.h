/* The shared part of the NCCL-API benchmarks in perf/nccl/ (README.md there): flags, the
 * communicator, timing and nccl-tests' table. Each <collective>_perf.c describes one collective
 * with a PerfCollective and calls perfMain. Written against the NCCL API only, so the same
 * programs measure forestcc's shim and a real NCCL, on host memory (forestcc's extension) or, with
 * -M gpu, on GPU memory (the CUDA driver, loaded with dlopen: no CUDA toolkit needed to build). */
#ifndef FORESTCC_NCCL_PERF_COMMON_H
#define FORESTCC_NCCL_PERF_COMMON_H

#include <stddef.h>

#include "nccl.h"

typedef struct {
  const char* name;      /* "all_reduce", as nccl-tests names it */
  int reduces;           /* prints the op; -o matters */
  int rooted;            /* prints the root; -r matters */
  int inPlace;           /* has an in-place form (else its columns print N/A) */
  /* elements of the send and receive buffers for `count` elements in the table (size / 4) */
  size_t (*sendCount)(size_t count, int nranks);
  size_t (*recvCount)(size_t count, int nranks);
  double (*busFactor)(int nranks); /* busbw = algbw * factor (nccl-tests' convention) */
  /* runs one operation: inPlace 1 passes the buffers of NCCL's in-place form */
  ncclResult_t (*run)(float* send, float* recv, size_t count, int inPlace, int root, int rank, int nranks,
                      ncclComm_t comm);
  /* element i of this rank's receive buffer after one operation, with input element j of rank r
   * being perfInput(r, j) */
  double (*expected)(size_t i, size_t count, int root, int rank, int nranks);
} PerfCollective;

double perfInput(int rank, size_t i);
/* The stream every call goes on: NULL on host memory, the benchmark's own with -M gpu. */
cudaStream_t perfStream(void);
/* memcpy between the benchmark's buffers (host memory, or GPU memory with -M gpu). */
void perfCopy(void* dst, const void* src, size_t bytes);
int perfMain(int argc, char** argv, const PerfCollective* coll);

#endif
