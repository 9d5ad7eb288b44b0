// Before-change stand-in: every "level" runs main's reduceElements (x86-64-v2, F16C for float16 at run time).
#include "executor/reduce_kernels.hpp"
namespace forestcc::executor {
const char* name(CpuIsa) { return "before"; }
bool parse(const std::string& t, CpuIsa& out) { out = CpuIsa::V2; return t == "v2"; }
CpuIsa cpuIsaSupported() { return CpuIsa::V2; }
void reduceElementsWith(CpuIsa, void* dst, const void* const* srcs, int n, size_t count, DataType type, ReduceOp op) {
  reduceElements(dst, srcs, n, count, type, op);
}
}
