// forestcc-reduce-bench: the CPU executor's element-wise reduction (executor/reduce_kernels.hpp)
// in one thread of one process, at each instruction-set level this CPU runs, per dtype and size.
// Levels are interleaved (one timed call of each in turn, over and over), so a machine shared
// with other work slows them alike; the table gives the fastest of the repetitions (the least
// disturbed) and their median. GB/s counts the memory the call touches: every source read
// once and the destination written once, (sources + 1) x bytes / time.
//   forestcc-reduce-bench [--min 64K] [--max 64M] [--dtypes float32,bfloat16,...] [--levels v2,avx2,avx512]
//                         [--op sum] [--sources 2] [--reps 30] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "executor/reduce_kernels.hpp"

using namespace forestcc;
using executor::CpuIsa;
using Clock = std::chrono::steady_clock;
using bench::parseSize;
using bench::PlainMemory;

namespace {

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = std::min(s.find(',', b), s.size());
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// Typical finite values of each dtype (random normals scaled, as gradients look), so no
// conversion takes a NaN or overflow path that real data would not.
void fill(uint8_t* p, size_t bytes, DataType type, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const size_t count = bytes / elementSize(type);
  for (size_t i = 0; i < count; ++i) {
    const float x = normal(rng);
    switch (type) {
      case DataType::Float32: reinterpret_cast<float*>(p)[i] = x; break;
      case DataType::Float64: reinterpret_cast<double*>(p)[i] = x; break;
      case DataType::Float16: reinterpret_cast<_Float16*>(p)[i] = static_cast<_Float16>(x); break;
      case DataType::BFloat16: {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(u >> 16);
        break;
      }
      case DataType::Float8E4M3: p[i] = static_cast<uint8_t>(0x30 + (rng() & 0x1f)) | (rng() & 0x80); break;
      case DataType::Float8E5M2: p[i] = static_cast<uint8_t>(0x38 + (rng() & 0x0f)) | (rng() & 0x80); break;
      default:
        for (size_t k = 0; k < elementSize(type); ++k) p[i * elementSize(type) + k] = static_cast<uint8_t>(rng());
        break;
    }
  }
}

struct Result {
  std::string dtype, level;
  size_t bytes;
  double bestGBs, medianGBs;
};

}  // namespace

int main(int argc, char** argv) {
  size_t minBytes = 64 << 10, maxBytes = 64 << 20;
  std::string dtypes = "float32,bfloat16,float16,float8_e4m3,int32", levelsArg, opName = "sum", jsonPath;
  int sources = 2, reps = 30;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--min") minBytes = parseSize(next());
      else if (a == "--max") maxBytes = parseSize(next());
      else if (a == "--dtypes") dtypes = next();
      else if (a == "--levels") levelsArg = next();
      else if (a == "--op") opName = next();
      else if (a == "--sources") sources = std::stoi(next());
      else if (a == "--reps") reps = std::stoi(next());
      else if (a == "--json") jsonPath = next();
      else if (a == "-h" || a == "--help") {
        std::puts("forestcc-reduce-bench [--min 64K] [--max 64M] [--dtypes float32,bfloat16,...] "
                  "[--levels v2,avx2,avx512] [--op sum] [--sources 2] [--reps 30] [--json FILE]\n"
                  "One thread reduces `sources` buffers of each size (x4 steps) into a separate one, at each "
                  "level (default: every level this CPU runs), interleaved; prints the best and median GB/s "
                  "of (sources + 1) x bytes moved per call.");
        return 0;
      } else throw std::invalid_argument("unknown argument " + a);
    }
    std::vector<CpuIsa> levels;
    if (levelsArg.empty()) {
      for (int l = 0; l <= static_cast<int>(executor::cpuIsaSupported()); ++l) levels.push_back(static_cast<CpuIsa>(l));
    } else {
      for (const std::string& name : splitList(levelsArg)) {
        CpuIsa isa;
        if (!executor::parse(name, isa)) throw std::invalid_argument("unknown level " + name);
        levels.push_back(isa);
      }
    }
    ReduceOp op;
    if (!parse(opName, op)) throw std::invalid_argument("unknown op " + opName);
    if (sources < 2) throw std::invalid_argument("--sources must be at least 2");
    if (reps < 1) throw std::invalid_argument("--reps must be at least 1");  // the table reads the fastest
    if (minBytes == 0 || minBytes > maxBytes) throw std::invalid_argument("--min must be at least 1 byte and at most --max");

    std::vector<Result> results;
    std::printf("# %d sources, op %s, %d interleaved repetitions; GB/s = (sources + 1) x bytes / time\n", sources,
                opName.c_str(), reps);
    std::printf("%-12s %10s", "dtype", "bytes");
    for (CpuIsa l : levels) std::printf("  %8s best/median", executor::name(l));
    std::printf("\n");
    for (const std::string& dtypeName : splitList(dtypes)) {
      DataType type;
      if (!parse(dtypeName, type)) throw std::invalid_argument("unknown dtype " + dtypeName);
      for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 4) {
        const size_t count = bytes / elementSize(type);
        std::vector<std::unique_ptr<PlainMemory>> bufs;
        std::vector<const void*> srcs;
        for (int j = 0; j < sources; ++j) {
          bufs.push_back(std::make_unique<PlainMemory>(bytes));
          fill(reinterpret_cast<uint8_t*>(bufs.back()->data()), bytes, type, 17 + j);
          srcs.push_back(bufs.back()->data());
        }
        PlainMemory dst(bytes);
        std::memset(dst.data(), 0, bytes);
        // Calls per timing: enough that one timing takes about 0.2 ms at 20 GB/s.
        const int calls = static_cast<int>(std::max<size_t>(1, (4u << 20) / ((sources + 1) * bytes)));
        std::vector<std::vector<double>> seconds(levels.size());
        for (int r = -1; r < reps; ++r) {  // r = -1 warms up
          for (size_t l = 0; l < levels.size(); ++l) {
            const auto t0 = Clock::now();
            for (int c = 0; c < calls; ++c)
              executor::reduceElementsWith(levels[l], dst.data(), srcs.data(), sources, count, type, op);
            const double s = std::chrono::duration<double>(Clock::now() - t0).count() / calls;
            if (r >= 0) seconds[l].push_back(s);
          }
        }
        std::printf("%-12s %10zu", dtypeName.c_str(), bytes);
        for (size_t l = 0; l < levels.size(); ++l) {
          std::vector<double>& s = seconds[l];
          std::sort(s.begin(), s.end());
          const double moved = static_cast<double>(sources + 1) * bytes;
          const Result res{dtypeName, executor::name(levels[l]), bytes, moved / s.front() / 1e9,
                           moved / s[s.size() / 2] / 1e9};
          std::printf("  %8.2f / %-8.2f", res.bestGBs, res.medianGBs);
          results.push_back(res);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
    if (!jsonPath.empty()) {
      std::ofstream out(jsonPath);
      out << "{\"sources\": " << sources << ", \"op\": \"" << opName << "\", \"reps\": " << reps << ", \"results\": [";
      for (size_t i = 0; i < results.size(); ++i)
        out << (i ? ",\n " : "\n ") << "{\"dtype\": \"" << results[i].dtype << "\", \"level\": \"" << results[i].level
            << "\", \"bytes\": " << results[i].bytes << ", \"best_gbs\": " << results[i].bestGBs
            << ", \"median_gbs\": " << results[i].medianGBs << "}";
      out << "]}\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "forestcc-reduce-bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
