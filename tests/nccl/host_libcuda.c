/* A stand-in for the CUDA driver whose "device memory" is host memory (built with SONAME
 * libcuda.so.1, found through LD_LIBRARY_PATH), so that the GPU-memory code of device_check.c and
 * of perf/nccl (-M gpu), their buffers, calls and reference results, runs in CI without a GPU:
 * every allocation is malloc, every copy a memcpy, every stream operation completes at once, and
 * the shim is told that pointers are host memory (no device ordinal), so it runs the calls on its
 * host path. Not a CUDA driver. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int cuInit(unsigned flags) { return (int)flags; }
int cuDeviceGet(int* device, int ordinal) { *device = ordinal; return 0; }
int cuDevicePrimaryCtxRetain(void** ctx, int device) { *ctx = (void*)(uintptr_t)(device + 1); return 0; }
int cuCtxSetCurrent(void* ctx) { return ctx ? 0 : 1; }
int cuCtxGetDevice(int* device) { *device = 0; return 0; }
int cuMemAlloc_v2(unsigned long long* p, size_t bytes) { *p = (uintptr_t)malloc(bytes); return *p ? 0 : 2; }
int cuMemFree_v2(unsigned long long p) { free((void*)(uintptr_t)p); return 0; }
int cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t bytes) {
  memcpy((void*)(uintptr_t)dst, src, bytes);
  return 0;
}
int cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t bytes) {
  memcpy(dst, (void*)(uintptr_t)src, bytes);
  return 0;
}
int cuStreamCreate(void** stream, unsigned flags) { *stream = (void*)(uintptr_t)(0x100 + flags); return 0; }
int cuStreamSynchronize(void* stream) { return stream ? 0 : 0; }
/* The memory type says "device" (device_check.c asks it of ncclMemAlloc's memory); the ordinal is
 * unknown, which the shim reads as host memory. */
int cuPointerGetAttribute(void* data, int attribute, unsigned long long p) {
  if (!p) return 1;
  if (attribute == 2) { *(unsigned*)data = 2; return 0; }
  return 1;
}
int cuMemHostAlloc(void** p, size_t bytes, unsigned flags) { *p = malloc(bytes); return flags && *p ? 0 : 2; }
int cuMemHostGetDevicePointer_v2(unsigned long long* d, void* p, unsigned flags) { *d = (uintptr_t)p; return (int)flags; }
int cuStreamWaitValue32_v2(void* s, unsigned long long a, unsigned v, unsigned f) { return s && a && v && !f ? 0 : 0; }
/* for perf/nccl's -M gpu */
int cuDeviceGetCount(int* count) { *count = 1; return 0; }
int cuMemcpy(unsigned long long dst, unsigned long long src, size_t bytes) {
  memcpy((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, bytes);
  return 0;
}
