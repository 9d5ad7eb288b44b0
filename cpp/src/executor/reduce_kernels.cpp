#include "executor/reduce_kernels.hpp"

#include <cstring>
#include <string>

#include "forestcc/error.hpp"

namespace forestcc::executor {

// One set of entry points per level (reduce_kernels_<level>.cpp, the same code compiled with
// different instruction sets).
#define FORESTCC_DECLARE_LEVEL(level)                                                                   \
  namespace level {                                                                                     \
  void reduceElements(void* dst, const void* const* srcs, int n, size_t count, DataType type, ReduceOp op); \
  void divideElements(void* data, size_t count, DataType type, int divisor);                            \
  }
FORESTCC_DECLARE_LEVEL(v2)
FORESTCC_DECLARE_LEVEL(avx2)
FORESTCC_DECLARE_LEVEL(avx512)
#undef FORESTCC_DECLARE_LEVEL

namespace {

struct Kernels {
  void (*reduce)(void*, const void* const*, int, size_t, DataType, ReduceOp);
  void (*divide)(void*, size_t, DataType, int);
};

// Indexed by CpuIsa.
constexpr Kernels kLevels[kCpuIsaCount] = {
    {v2::reduceElements, v2::divideElements},
    {avx2::reduceElements, avx2::divideElements},
    {avx512::reduceElements, avx512::divideElements},
};

const Kernels& kernelsFor(CpuIsa isa) {
  static const CpuIsa best = cpuIsaSupported();
  if (static_cast<int>(isa) > static_cast<int>(best))
    throw Error(ErrorCode::InvalidUsage, std::string("forestcc: the CPU reductions at level ") + name(isa) +
                                             " need instructions this CPU lacks (it runs up to " + name(best) + ")");
  return kLevels[static_cast<int>(isa)];
}

}  // namespace

void reduceElementsWith(CpuIsa isa, void* dst, const void* const* srcs, int n, size_t count, DataType type,
                        ReduceOp op) {
  if (count == 0 || n <= 0) return;
  if (n == 1) {
    if (dst != srcs[0]) std::memcpy(dst, srcs[0], count * elementSize(type));
    return;
  }
  kernelsFor(isa).reduce(dst, srcs, n, count, type, op);
}

void divideElementsWith(CpuIsa isa, void* data, size_t count, DataType type, int divisor) {
  if (divisor == 1 || count == 0) return;
  kernelsFor(isa).divide(data, count, type, divisor);
}

void reduceElements(void* dst, const void* const* srcs, int n, size_t count, DataType type, ReduceOp op) {
  reduceElementsWith(cpuIsaInUse(), dst, srcs, n, count, type, op);
}

void divideElements(void* data, size_t count, DataType type, int divisor) {
  divideElementsWith(cpuIsaInUse(), data, count, type, divisor);
}

}  // namespace forestcc::executor
