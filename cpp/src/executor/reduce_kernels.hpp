// Element-wise reductions of the CPU executor, for every forestcc DataType. float16, bfloat16 and
// the two fp8 formats accumulate in float32 (one rounding per reduce op, not per source).
// Compiled for several instruction-set levels (executor/cpu_isa.hpp), which give the same bits;
// the process uses one, chosen once.
#pragma once

#include <cstddef>

#include "executor/cpu_isa.hpp"
#include "forestcc/collectives.hpp"

namespace forestcc::executor {

// dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) for i < count. dst may be one of srcs (the same
// range exactly); otherwise it must not overlap them. Avg reduces as Sum (divide at the end).
void reduceElements(void* dst, const void* const* srcs, int n, size_t count, DataType type, ReduceOp op);

// data[i] /= divisor: the last step of an average. Integers truncate toward zero.
void divideElements(void* data, size_t count, DataType type, int divisor);

// The same at a given level (tests and benchmarks compare them); the CPU must run it
// (isa <= cpuIsaSupported()).
void reduceElementsWith(CpuIsa isa, void* dst, const void* const* srcs, int n, size_t count, DataType type,
                        ReduceOp op);
void divideElementsWith(CpuIsa isa, void* data, size_t count, DataType type, int divisor);

}  // namespace forestcc::executor
