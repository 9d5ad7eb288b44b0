// forestcc-channel-bench: one-way signal/wait latency and put bandwidth between two ranks on one
// node, with single-thread memcpy measured in the same run as the reference.
//   forestcc-run -n 2 forestcc-channel-bench [--min 1K] [--max 256M] [--iters N] [--json FILE]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "forestcc/communicator.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"

using namespace forestcc;
using Clock = std::chrono::steady_clock;

namespace {

size_t parseSize(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string suffix(end);
  size_t mult = 1;
  if (suffix == "K" || suffix == "k") mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m") mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g") mult = 1ull << 30;
  else if (!suffix.empty()) throw std::invalid_argument("bad size '" + s + "' (use a number with K, M or G)");
  return static_cast<size_t>(v * mult);
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int itersFor(size_t bytes, int requested) {
  if (requested > 0) return requested;
  size_t budget = 2ull << 30;  // about 2 GiB moved per size
  size_t n = budget / (bytes ? bytes : 1);
  return static_cast<int>(std::max<size_t>(5, std::min<size_t>(n, 2000)));
}

struct Row {
  size_t bytes;
  double putShm, putCma, memcpyGBs;
};

void usage() {
  std::puts(
      "usage: forestcc-run -n 2 forestcc-channel-bench [--min SIZE] [--max SIZE] [--iters N]\n"
      "                                               [--latency-iters N] [--json FILE]\n"
      "Measures, between rank 0 and rank 1 on one node: one-way signal/wait latency (ping-pong / 2)\n"
      "and put bandwidth into the peer's shared memory (shm) and into ordinary peer memory (cma),\n"
      "next to single-thread memcpy on rank 0 in the same run. SIZE takes K/M/G suffixes (binary).");
}

}  // namespace

int main(int argc, char** argv) {
  size_t minBytes = 1 << 10, maxBytes = 256ull << 20;
  int iters = 0, latencyIters = 200000;
  std::string jsonPath;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--min") minBytes = parseSize(next());
      else if (a == "--max") maxBytes = parseSize(next());
      else if (a == "--iters") iters = std::stoi(next());
      else if (a == "--latency-iters") latencyIters = std::stoi(next());
      else if (a == "--json") jsonPath = next();
      else if (a == "-h" || a == "--help") { usage(); return 0; }
      else throw std::invalid_argument("unknown argument " + a);
    }
    if (minBytes > maxBytes) throw std::invalid_argument("--min is larger than --max");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "forestcc-channel-bench: %s\n", e.what());
    return 2;
  }

  try {
    Communicator comm(Bootstrap::fromEnvironment(config::timeoutSeconds()));
    if (comm.size() != 2) {
      if (comm.rank() == 0) std::fprintf(stderr, "forestcc-channel-bench: needs exactly 2 ranks (got %d)\n", comm.size());
      return 2;
    }
    const int me = comm.rank(), peer = 1 - me;
    SharedAllocation shmBuf(maxBytes), srcBuf(maxBytes);
    std::vector<char> plainBuf(maxBytes);  // ordinary memory: the peer reaches it by single copy
    std::memset(shmBuf.data(), 1, maxBytes);
    std::memset(srcBuf.data(), 2, maxBytes);
    std::memset(plainBuf.data(), 3, maxBytes);
    // Rank 0 puts from srcBuf into rank 1's shmBuf (channel 0) and plainBuf (channel 1).
    auto src = comm.registerMemory(me == 0 ? srcBuf.data() : shmBuf.data(), maxBytes);
    auto plain = comm.registerMemory(me == 0 ? srcBuf.data() : plainBuf.data(), maxBytes);
    auto shmCh = comm.connect(peer, src, 0);
    auto cmaCh = comm.connect(peer, plain, 1);

    // ---- latency: ping-pong, one-way = round trip / 2 ----
    for (int warm = 0; warm < 2; ++warm) {
      int n = warm == 0 ? latencyIters / 10 : latencyIters;
      comm.bootstrap().barrier();
      auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) {
        if (me == 0) {
          shmCh->signal();
          shmCh->wait();
        } else {
          shmCh->wait();
          shmCh->signal();
        }
      }
      double oneWayUs = seconds(t0, Clock::now()) / n / 2 * 1e6;
      if (warm == 1 && me == 0) {
        std::printf("# forestcc-channel-bench: 2 ranks on node '%s', %d round trips\n",
                    comm.nodeName(0).c_str(), n);
        std::printf("# one-way signal/wait latency: %.3f us\n#\n", oneWayUs);
        if (!jsonPath.empty()) {
          std::ofstream(jsonPath) << "{\"latency_us\": " << oneWayUs << ", \"rows\": [";
        }
      }
    }

    // ---- bandwidth ----
    std::vector<Row> rows;
    if (me == 0)
      std::printf("# %12s %8s %14s %14s %14s %8s\n", "size(B)", "iters", "put shm GB/s", "put cma GB/s",
                  "memcpy GB/s", "shm/cpy");
    for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 2) {
      int n = itersFor(bytes, iters);
      Row row{bytes, 0, 0, 0};
      for (int which = 0; which < 2; ++which) {
        Channel& ch = which == 0 ? *shmCh : *cmaCh;
        comm.bootstrap().barrier();
        if (me == 0) {
          ch.put(0, 0, bytes);  // warm-up: fault in the pages
          ch.signal();
          ch.wait();
          auto t0 = Clock::now();
          for (int i = 0; i < n; ++i) ch.put(0, 0, bytes);
          ch.signal();
          ch.wait();  // the peer has seen everything
          double gbs = static_cast<double>(bytes) * n / seconds(t0, Clock::now()) / 1e9;
          (which == 0 ? row.putShm : row.putCma) = gbs;
        } else {
          ch.wait();
          ch.signal();
          ch.wait();
          ch.signal();
        }
      }
      if (me == 0) {
        char* dst = static_cast<char*>(shmBuf.data());
        std::memcpy(dst, srcBuf.data(), bytes);
        auto t0 = Clock::now();
        for (int i = 0; i < n; ++i) std::memcpy(dst, srcBuf.data(), bytes);
        row.memcpyGBs = static_cast<double>(bytes) * n / seconds(t0, Clock::now()) / 1e9;
        std::printf("  %12zu %8d %14.2f %14.2f %14.2f %8.2f\n", bytes, n, row.putShm, row.putCma, row.memcpyGBs,
                    row.putShm / row.memcpyGBs);
        std::fflush(stdout);
        rows.push_back(row);
      }
      if (bytes == 0) break;
    }
    if (me == 0 && !jsonPath.empty()) {
      std::ofstream f(jsonPath, std::ios::app);
      for (size_t i = 0; i < rows.size(); ++i)
        f << (i ? ", " : "") << "{\"bytes\": " << rows[i].bytes << ", \"put_shm_gbs\": " << rows[i].putShm
          << ", \"put_cma_gbs\": " << rows[i].putCma << ", \"memcpy_gbs\": " << rows[i].memcpyGBs << "}";
      f << "]}\n";
    }
    comm.bootstrap().barrier();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
