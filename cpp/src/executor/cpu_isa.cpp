#include "executor/cpu_isa.hpp"

#include "forestcc/config.hpp"
#include "forestcc/error.hpp"

namespace forestcc::executor {

namespace {
constexpr const char* kNames[kCpuIsaCount] = {"v2", "avx2", "avx512"};
}  // namespace

const char* name(CpuIsa isa) { return kNames[static_cast<int>(isa)]; }

bool parse(const std::string& text, CpuIsa& out) {
  for (int i = 0; i < kCpuIsaCount; ++i)
    if (text == kNames[i]) {
      out = static_cast<CpuIsa>(i);
      return true;
    }
  return false;
}

CpuIsa cpuIsaSupported() {
  // __builtin_cpu_supports also checks that the OS saves the wider registers (XCR0).
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return avx512 ? CpuIsa::Avx512 : avx2 ? CpuIsa::Avx2 : CpuIsa::V2;
}

CpuIsa cpuIsaInUse() {
  static const CpuIsa chosen = [] {
    const std::string text = configString("FORESTCC_CPU_ISA");
    const CpuIsa best = cpuIsaSupported();
    if (text == "auto") return best;
    CpuIsa asked;
    if (!parse(text, asked))
      throw Error(ErrorCode::InvalidUsage, "forestcc: FORESTCC_CPU_ISA='" + text + "' is not auto, v2, avx2 or avx512");
    if (static_cast<int>(asked) > static_cast<int>(best))
      throw Error(ErrorCode::InvalidUsage, "forestcc: FORESTCC_CPU_ISA=" + text + " but this CPU runs at most " +
                                               name(best));
    return asked;
  }();
  return chosen;
}

}  // namespace forestcc::executor
