#include "nccl/device_pointers.hpp"

#include <dlfcn.h>


namespace forestcc::nccl {

namespace {
// The two driver-API values used (cuda.h): CU_POINTER_ATTRIBUTE_MEMORY_TYPE and CU_MEMORYTYPE_DEVICE.
constexpr int kAttributeMemoryType = 2;
constexpr unsigned kMemoryTypeDevice = 2;
using PointerGetAttribute = int (*)(void* data, int attribute, unsigned long long pointer);

PointerGetAttribute driverQuery() {
  // RTLD_NOLOAD: never load CUDA into a process that did not (no GPU pointers can exist there).
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  return driver ? reinterpret_cast<PointerGetAttribute>(dlsym(driver, "cuPointerGetAttribute")) : nullptr;
}
}  // namespace

bool isDevicePointer(const void* p) {
  if (!p) return false;
  // Looked up once, at the first call (after the program made its communicators, so after it
  // loaded CUDA if it uses GPUs at all): a dlopen per call would cost more than a small collective.
  static const PointerGetAttribute query = driverQuery();
  if (!query) return false;
  unsigned type = 0;
  if (query(&type, kAttributeMemoryType, reinterpret_cast<unsigned long long>(p)) != 0) return false;
  return type == kMemoryTypeDevice;
}

}  // namespace forestcc::nccl

namespace forestcc::nccl {

int currentDevice() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  if (!driver) return -1;
  using CtxGetDevice = int (*)(int* device);
  auto get = reinterpret_cast<CtxGetDevice>(dlsym(driver, "cuCtxGetDevice"));
  int device = -1;
  if (!get || get(&device) != 0) return -1;
  return device;
}

}  // namespace forestcc::nccl
