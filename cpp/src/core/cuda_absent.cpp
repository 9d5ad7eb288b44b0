// Answers of a build without CUDA sources (FORESTCC_CUDA=OFF or no nvcc).
#ifndef FORESTCC_WITH_CUDA
#include "forestcc/cuda.hpp"
#include "forestcc/error.hpp"

namespace forestcc {
bool builtWithCuda() { return false; }
int cudaDeviceCount() { return 0; }
bool cudaSemaphoreSelfTest() { return false; }
void* cudaAllocate(size_t) { throw Error(ErrorCode::InvalidUsage, "this forestcc was built without CUDA"); }
void cudaRelease(void*) {}
bool cudaLoadKernels(int) { return false; }
}  // namespace forestcc
#endif
