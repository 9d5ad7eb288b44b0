// Answers of a build without CUDA sources (FORESTCC_CUDA=OFF or no nvcc).
#ifndef FORESTCC_WITH_CUDA
#include "forestcc/cuda.hpp"

namespace forestcc {
bool builtWithCuda() { return false; }
int cudaDeviceCount() { return 0; }
bool cudaSemaphoreSelfTest() { return false; }
}  // namespace forestcc
#endif
