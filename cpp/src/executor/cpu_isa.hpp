// The x86 instruction-set levels the CPU reductions are compiled for (executor/reduce_kernels*),
// and which one this process uses: the best the CPU supports, or FORESTCC_CPU_ISA's.
#pragma once

#include <string>

namespace forestcc::executor {

enum class CpuIsa {
  V2,      // x86-64-v2 (SSE4.2): what the rest of libforestcc is built for
  Avx2,    // + AVX2, FMA, F16C
  Avx512,  // + AVX-512 F, BW, DQ, VL
};
constexpr int kCpuIsaCount = 3;

const char* name(CpuIsa isa);
bool parse(const std::string& text, CpuIsa& out);

// The best level this CPU (and its operating system) can run.
CpuIsa cpuIsaSupported();

// The level the reductions use: FORESTCC_CPU_ISA ("auto": cpuIsaSupported()), read once. Asking for
// a level the CPU cannot run, or an unknown one, throws InvalidUsage.
CpuIsa cpuIsaInUse();

}  // namespace forestcc::executor
