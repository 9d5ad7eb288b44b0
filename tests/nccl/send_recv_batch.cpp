// Collectives::sendRecv, the point-to-point batch the NCCL shim runs a group's sends and receives
// as, called directly on the C++ API (public headers and libforestcc.so only), under
// forestcc-run: a two-way ring with several messages per peer and messages to oneself, blocking
// and async, against the expected values; a queued batch followed by a later send and receive
// (they must not overtake it); then its argument checks, which the shim never reaches (it checks
// peers and buffers itself); last, the destructor with work still queued. Prints "OK <rank>";
// exits 1 on anything wrong.
#include <unistd.h>

#include <algorithm>
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
  // int32 elements of the k-th message to each peer: small ones, which travel in the sender's
  // manifest space (inline), one at that limit (128 KiB) and larger ones, read from the sender's
  // buffer; the 128 KiB ones together pass the batch's inline budget (1 MiB), so some of them go
  // the other way (point_to_point.cpp, kInlineMessageBytes)
  const size_t sizes[] = {5, 0, 300, 32768, 32769, 70000, 32768, 32768, 32768, 32768, 7};
  const int kinds = static_cast<int>(sizeof sizes / sizeof *sizes);
  std::vector<std::vector<int32_t>> out, in;
  std::vector<forestcc::SendMessage> sends;
  std::vector<forestcc::RecvMessage> recvs;
  for (int k = 0; k < kinds; ++k)
    for (int peer : {next, prev, rank}) {
      out.emplace_back(sizes[k]);
      for (size_t i = 0; i < sizes[k]; ++i) out.back()[i] = valueOf(rank, peer, k, i);
    }
  for (int k = 0; k < kinds; ++k)
    for (int m = 0; m < 3; ++m) in.emplace_back(sizes[k], -1);  // from prev, next, this rank
  size_t o = 0, r = 0;
  for (int k = 0; k < kinds; ++k) {
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
  for (int k = 0; k < kinds; ++k)
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

// A queued batch with both a send and a receive, then a second send and a receive from the same
// peers called after it: the batch takes the first message of each pair, the later receive the
// second, whether that receive blocks or is queued too (it must not overtake the batch, which
// waits in the send queue). Same sizes, so only the values tell the messages apart.
void laterReceiveAfterBatch(forestcc::Collectives& coll, bool asyncReceive) {
  const int rank = coll.rank(), n = coll.size();
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const size_t count = 64;
  std::vector<int32_t> first(count), second(count), inFirst(count, -1), inSecond(count, -1);
  for (size_t i = 0; i < count; ++i) {
    first[i] = valueOf(rank, next, 1, i);
    second[i] = valueOf(rank, next, 2, i);
  }
  auto batch = coll.sendRecv({{next, first.data(), count * 4}}, {{prev, inFirst.data(), count * 4}}, true);
  auto send = coll.send(second.data(), count * 4, next, true);
  auto recv = coll.recv(inSecond.data(), count * 4, prev, asyncReceive);
  if (recv) recv->wait();
  send->wait();
  batch->wait();
  const std::string how = asyncReceive ? "a queued" : "a blocking";
  for (size_t i = 0; i < count; ++i) {
    if (inFirst[i] != valueOf(prev, rank, 1, i)) {
      fail(rank, "the batch followed by " + how + " recv: the batch's message element " + std::to_string(i) +
                     " is " + std::to_string(inFirst[i]) + ", expected " + std::to_string(valueOf(prev, rank, 1, i)));
      return;
    }
    if (inSecond[i] != valueOf(prev, rank, 2, i)) {
      fail(rank, "the batch followed by " + how + " recv: the later recv's element " + std::to_string(i) +
                     " is " + std::to_string(inSecond[i]) + ", expected " + std::to_string(valueOf(prev, rank, 2, i)));
      return;
    }
  }
}

// Collectives destroyed with a send and a batch still queued (the even rank of each pair): the
// destructor lets them finish, so its peer gets both messages and it gets the batch's reply.
// The peer enters late (a short sleep) so that the work is still queued when the destructor
// starts; the check holds whatever the timing.
void destroyedWithQueuedWork(std::unique_ptr<forestcc::Collectives>& coll) {
  const int rank = coll->rank(), n = coll->size();
  const int peer = rank % 2 == 0 ? rank + 1 : rank - 1;
  const size_t count = 1000;
  if (peer >= n) return;  // the last rank of an odd count has no pair
  std::vector<int32_t> a(count), b(count), c(count);
  if (rank % 2 == 0) {
    for (size_t i = 0; i < count; ++i) a[i] = valueOf(rank, peer, 1, i), b[i] = valueOf(rank, peer, 2, i);
    std::fill(c.begin(), c.end(), -1);
    coll->send(a.data(), count * 4, peer, true);
    coll->sendRecv({{peer, b.data(), count * 4}}, {{peer, c.data(), count * 4}}, true);
    coll.reset();
    for (size_t i = 0; i < count; ++i)
      if (c[i] != valueOf(peer, rank, 3, i)) {
        fail(rank, "a batch queued before the destructor: element " + std::to_string(i) + " is " + std::to_string(c[i]));
        return;
      }
  } else {
    usleep(200 * 1000);
    std::fill(a.begin(), a.end(), -1);
    std::fill(b.begin(), b.end(), -1);
    for (size_t i = 0; i < count; ++i) c[i] = valueOf(rank, peer, 3, i);
    coll->recv(a.data(), count * 4, peer);
    coll->sendRecv({{peer, c.data(), count * 4}}, {{peer, b.data(), count * 4}});
    for (size_t i = 0; i < count; ++i)
      if (a[i] != valueOf(peer, rank, 1, i) || b[i] != valueOf(peer, rank, 2, i)) {
        fail(rank, "work queued before its peer's destructor: element " + std::to_string(i) + " is " +
                       std::to_string(a[i]) + ", " + std::to_string(b[i]));
        return;
      }
  }
}

}  // namespace

int main() {
  try {
    auto comm = std::make_shared<forestcc::Communicator>(forestcc::Bootstrap::fromEnvironment(60.0));
    auto owned = std::make_unique<forestcc::Collectives>(comm);
    forestcc::Collectives& coll = *owned;
    const int rank = coll.rank(), n = coll.size();
    ringRound(coll, false);
    ringRound(coll, true);
    if (n > 1) {
      for (int round = 0; round < 20; ++round) {
        laterReceiveAfterBatch(coll, false);
        laterReceiveAfterBatch(coll, true);
      }
    }

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
    destroyedWithQueuedWork(owned);
    if (wrong) return 1;
    std::printf("OK %d\n", rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return 1;
  }
}
