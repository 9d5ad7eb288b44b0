// forestcc-channel-bench: one-way signal/wait latency and put bandwidth between two ranks on one
// node, with single-thread memcpy measured in the same run as the reference. With --both-ways,
// both ranks put into each other at once and both copy locally at once: the copy floor of a
// two-rank all_gather or all_to_all on this node (what no library's copies can beat).
//   forestcc-run -n 2 forestcc-channel-bench [--min 1K] [--max 256M] [--iters N] [--both-ways] [--json FILE]

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
#include "executor/copy_kernels.hpp"
#include "bench_support.hpp"

using namespace forestcc;
using Clock = std::chrono::steady_clock;
using bench::parseSize;
using bench::PlainMemory;

namespace {

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

// Both ranks at once, per size: put into the peer's shared memory, put into its ordinary memory
// (cross-process copy), memcpy and streaming-store copy within each rank. Times are per
// iteration, the slower rank's; bytes are what each rank moves.
int bothWays(Communicator& comm, size_t minBytes, size_t maxBytes, int iters, const std::string& jsonPath) {
  const int me = comm.rank(), peer = 1 - me;
  // Each region: [0, max) this rank's data, [max, 2 max) where the peer's lands.
  SharedAllocation shm(2 * maxBytes);
  PlainMemory plain(2 * maxBytes), local(2 * maxBytes);
  std::memset(shm.data(), 1 + me, 2 * maxBytes);
  std::memset(plain.data(), 3 + me, 2 * maxBytes);
  std::memset(local.data(), 5 + me, 2 * maxBytes);
  auto shmCh = comm.connect(peer, comm.registerMemory(shm.data(), 2 * maxBytes), 0);
  auto cmaCh = comm.connect(peer, comm.registerMemory(plain.data(), 2 * maxBytes), 1);
  const char* names[4] = {"put shm", "put cma", "memcpy", "memcpy nt"};
  if (me == 0) {
    std::printf("# forestcc-channel-bench --both-ways: 2 ranks on node '%s'; us per iteration (the slower rank),\n"
                "# each rank moving SIZE bytes at the same time as the other\n",
                comm.nodeName(0).c_str());
    std::printf("# %12s %8s %12s %12s %12s %12s\n", "size(B)", "iters", names[0], names[1], names[2], names[3]);
  }
  std::string json = "{\"both_ways\": true, \"rows\": [";
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 2) {
    const int n = itersFor(bytes, iters);
    double us[4];
    for (int which = 0; which < 4; ++which) {
      auto once = [&] {
        if (which < 2) {
          Channel& ch = which == 0 ? *shmCh : *cmaCh;
          ch.put(maxBytes, 0, bytes);
          ch.signal();
          ch.wait();  // the peer's put into this rank is done too
        } else {
          executor::copyBytes(local.data() + maxBytes, local.data(), bytes, which == 3);
        }
      };
      once();  // warm-up: fault in the pages
      comm.bootstrap().barrier();
      auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) once();
      double mine = seconds(t0, Clock::now()) / n * 1e6;
      // The slower rank's time: exchange through the bootstrap (not timed).
      std::string theirs = comm.bootstrap().allGather(std::string(reinterpret_cast<char*>(&mine), sizeof mine))[peer];
      double other;
      std::memcpy(&other, theirs.data(), sizeof other);
      us[which] = std::max(mine, other);
    }
    if (me == 0) {
      std::printf("  %12zu %8d %12.1f %12.1f %12.1f %12.1f\n", bytes, n, us[0], us[1], us[2], us[3]);
      std::fflush(stdout);
      char row[256];
      std::snprintf(row, sizeof row,
                    "%s{\"bytes\": %zu, \"put_shm_us\": %.3f, \"put_cma_us\": %.3f, \"memcpy_us\": %.3f, "
                    "\"memcpy_nt_us\": %.3f}",
                    bytes == minBytes ? "" : ", ", bytes, us[0], us[1], us[2], us[3]);
      json += row;
    }
    if (bytes == 0) break;
  }
  if (me == 0 && !jsonPath.empty()) std::ofstream(jsonPath) << json << "]}\n";
  comm.bootstrap().barrier();
  return 0;
}

void usage() {
  std::puts(
      "usage: forestcc-run -n 2 forestcc-channel-bench [--min SIZE] [--max SIZE] [--iters N]\n"
      "                                               [--latency-iters N] [--both-ways] [--json FILE]\n"
      "Measures, between rank 0 and rank 1 on one node: one-way signal/wait latency (ping-pong / 2)\n"
      "and put bandwidth into the peer's shared memory (shm) and into ordinary peer memory (cma),\n"
      "next to single-thread memcpy on rank 0 in the same run. SIZE takes K/M/G suffixes (binary).\n"
      "--both-ways: both ranks put into each other at the same time (shared and ordinary memory),\n"
      "and both copy locally at the same time (memcpy, streaming stores); times per iteration. A\n"
      "two-rank in-place all_gather or all_to_all of 2*SIZE bytes moves SIZE bytes per rank, so these\n"
      "times are its floor on this node (perf/README.md, \"The copy floor\"). Each put iteration\n"
      "includes a signal/wait round (the copies' do not, and start together only at the first);\n"
      "streaming stores start at 64 KiB (below, that column is memcpy); the ordinary memory asks for\n"
      "huge pages, as numpy's large arrays do (the one-way mode's is a plain heap buffer);\n"
      "--latency-iters does not apply.");
}

}  // namespace

int main(int argc, char** argv) {
  size_t minBytes = 1 << 10, maxBytes = 256ull << 20;
  int iters = 0, latencyIters = 200000;
  bool both = false;
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
      else if (a == "--both-ways") both = true;
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
    if (both) return bothWays(comm, minBytes, maxBytes, iters, jsonPath);
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
  } catch (const std::exception& e) {  // forestcc errors, and a buffer mmap refused
    std::fprintf(stderr, "forestcc-channel-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
