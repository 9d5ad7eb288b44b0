/* A stand-in for the CUDA driver (built with SONAME libcuda.so.1 and preloaded), so the shim's
 * handling of GPU pointers is tested without a GPU: addresses 0xdead0000..0xdeadffff are "device
 * memory", every other pointer is unknown to CUDA (as host memory is), and the current device is 6.
 * Not a CUDA driver. */
#include <stdint.h>

int cuPointerGetAttribute(void* data, int attribute, unsigned long long ptr) {
  if (attribute != 2 /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */) return 1;
  if ((ptr & ~0xffffull) != 0xdead0000ull) return 1; /* CUDA_ERROR_INVALID_VALUE */
  *(unsigned*)data = 2;                              /* CU_MEMORYTYPE_DEVICE */
  return 0;
}

int cuCtxGetDevice(int* device) {
  *device = 6;
  return 0;
}
