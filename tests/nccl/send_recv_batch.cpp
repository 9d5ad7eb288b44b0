// Collectives::sendRecv, the point-to-point batch the NCCL shim runs a group's sends and receives
// as, called directly on the C++ API (public headers and libforestcc.so only), under
// forestcc-run: a two-way ring with several messages per peer and messages to oneself, blocking
// and async, against the expected values; then its argument checks, which the shim never
// reaches (it checks peers and buffers itself). Prints "OK <rank>"; exits 1 on anything wrong.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "forestcc/bootstrap.hpp"
#include "forestcc/collective_api.hpp"
#include "forestcc/communicator.hpp"
#include "forestcc/error.hpp"

namespace {

int wrong = 0;

void fail(int rank, const std::string& what) {
  std::fprintf(stderr, "ERROR rank %d: %s\n", rank, what.c_str());
  ++wrong;
}

// The call must throw InvalidUsage with `text` in its message.
template <class Call>
void expectRefused(int rank, const char* what, const char* text, Call&& call) {
  try {
    call();
    fail(rank, std::string(what) + ": accepted");
  } catch (const forestcc::Error& e) {
    if (e.code() != forestcc::ErrorCode::InvalidUsage || !std::strstr(e.what(), text))
      fail(rank, std::string(what) + ": '" + e.what() + "' does not say '" + text + "'");
  }
}

int32_t valueOf(int from, int to, int message, size_t i) {
  return from * 1000000 + to * 10000 + message * 1000 + static_cast<int32_t>(i);
}

void ringRound(forestcc::Collectives& coll, bool async) {
  const int rank = coll.rank(), n = coll.size();
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const size_t sizes[3] = {5, 0, 300};  // int32 elements of the k-th message to each peer
  std::vector<std::vector<int32_t>> out, in;
  std::vector<forestcc::SendMessage> sends;
  std::vector<forestcc::RecvMessage> recvs;
  for (int k = 0; k < 3; ++k)
    for (int peer : {next, prev, rank}) {
      out.emplace_back(sizes[k]);
      for (size_t i = 0; i < sizes[k]; ++i) out.back()[i] = valueOf(rank, peer, k, i);
    }
  for (int k = 0; k < 3; ++k)
    for (int m = 0; m < 3; ++m) in.emplace_back(sizes[k], -1);  // from prev, next, this rank
  size_t o = 0, r = 0;
  for (int k = 0; k < 3; ++k) {
    for (int peer : {next, prev, rank}) {
      sends.push_back({peer, out[o].data(), sizes[k] * 4});
      ++o;
    }
    for (int peer : {prev, next, rank}) {
      recvs.push_back({peer, in[r].data(), sizes[k] * 4});
      ++r;
    }
  }
  auto work = coll.sendRecv(sends, recvs, async);
  if (async == !work) fail(rank, "sendRecv returned the wrong kind of result for async=" + std::to_string(async));
  if (work) work->wait();
  r = 0;
  for (int k = 0; k < 3; ++k)
    for (int peer : {prev, next, rank}) {
      // with one or two ranks a peer appears more than once in a round; messages between two
      // ranks match in order, and the values depend only on (from, to, k), so this holds too
      for (size_t i = 0; i < sizes[k]; ++i)
        if (in[r][i] != valueOf(peer, rank, k, i)) {
          fail(rank, "message " + std::to_string(k) + " from " + std::to_string(peer) + " element " +
                         std::to_string(i) + " is " + std::to_string(in[r][i]));
          break;
        }
      ++r;
    }
}

}  // namespace

int main() {
  try {
    auto comm = std::make_shared<forestcc::Communicator>(forestcc::Bootstrap::fromEnvironment(60.0));
    forestcc::Collectives coll(comm);
    const int rank = coll.rank(), n = coll.size();
    ringRound(coll, false);
    ringRound(coll, true);

    int32_t x = 0;
    expectRefused(rank, "a peer out of range", ("sends[1].peer: " + std::to_string(n)).c_str(), [&] {
      coll.sendRecv({{rank, &x, 4}, {n, &x, 4}}, {});
    });
    expectRefused(rank, "a null receive buffer", "recvs[0].data is null with 4 bytes", [&] {
      coll.sendRecv({}, {{rank, nullptr, 4}});
    });
    expectRefused(rank, "a send to oneself without its receive", "to this rank itself", [&] {
      coll.sendRecv({{rank, &x, 4}}, {});
    });
    coll.barrier();
    if (wrong) return 1;
    std::printf("OK %d\n", rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return 1;
  }
}
