/* A stand-in for the CUDA driver (built with SONAME libcuda.so.1 and preloaded), so the shim's
 * handling of GPU pointers is tested without a GPU: addresses 0xdead0000..0xdeadffff are "device
 * memory" on device 6 (0xdeae0000..0xdeaeffff on device 7), every other pointer is unknown to CUDA
 * (as host memory is), and the current device is 6. It has no copy functions, so the shim's driver
 * calls beyond those fail with its message. Not a CUDA driver. */
#include <stdint.h>

int cuPointerGetAttribute(void* data, int attribute, unsigned long long ptr) {
  const int device = (ptr & ~0xffffull) == 0xdead0000ull ? 6 : (ptr & ~0xffffull) == 0xdeae0000ull ? 7 : -1;
  if (device < 0) return 1; /* CUDA_ERROR_INVALID_VALUE */
  if (attribute == 2) {     /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */
    *(unsigned*)data = 2;   /* CU_MEMORYTYPE_DEVICE */
    return 0;
  }
  if (attribute == 9) { /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
    *(int*)data = device;
    return 0;
  }
  return 1;
}

int cuCtxGetDevice(int* device) {
  *device = 6;
  return 0;
}
