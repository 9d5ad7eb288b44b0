// The CPU reductions at the v2 level (compile flags: CMakeLists.txt; code: reduce_kernels_body.hpp).
#define FORESTCC_REDUCE_ISA v2
#include "executor/reduce_kernels_body.hpp"
