// The CPU reductions at the avx512 level (compile flags: CMakeLists.txt; code: reduce_kernels_body.hpp).
#define FORESTCC_REDUCE_ISA avx512
#include "executor/reduce_kernels_body.hpp"
