// The per-rank programs the tree compiler writes into (tree_compiler.cpp; tree_plan._Program):
// workers made on first use, channels made on first use per worker pair, route and lane, the
// loopback handovers between a rank's workers, and at the end the doormen and entry handshakes
// that let a put into a peer start only once the peer is ready. Apart from the compiler because
// it knows nothing of trees: it takes (rank, worker key) and (worker, worker, route, lane) and
// hands out worker and channel ids in the order asked for, which is what makes the plan the
// Python reference's op for op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "forestcc/plan.hpp"
#include "plan/tree_compiler.hpp"

namespace forestcc::plan::trees {

struct ChannelKey {
  int x, wx, y, wy, route, lane;
  bool operator==(const ChannelKey& o) const {
    return x == o.x && wx == o.wx && y == o.y && wy == o.wy && route == o.route && lane == o.lane;
  }
};
struct ChannelKeyHash {
  size_t operator()(const ChannelKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int v : {k.x, k.wx, k.y, k.wy, k.route, k.lane}) h = (h ^ uint32_t(v)) * 1099511628211ull;
    return size_t(h);
  }
};

// tree_plan._Program: per-worker op lists, channels made on first use, entry handshakes last.
class Program {
 public:
  explicit Program(const TreeCompileOptions& o)
      : compact_(o.compact), reverse_(o.reverseRoute), workerIds_(o.nranks), items_(o.nranks),
        chans_(o.nranks) {}

  int worker(int rank, int64_t key) {
    if (compact_) key = 0;
    auto [it, added] = workerIds_[rank].try_emplace(key, int(items_[rank].size()));
    if (added) items_[rank].emplace_back();
    return it->second;
  }

  std::vector<Op>& ops(int rank, int wid) { return items_[rank][wid]; }

  // (channel on a, channel on b) joining worker wa of a and wb of b; data a -> b takes route_ab.
  std::pair<int, int> channel(int a, int wa, int b, int wb, int routeAB, int lane = 0);

  // Worker `from` of `rank` signals worker `to` of the same rank (a loopback channel pair, made
  // once per (rank, from, to)).
  void handover(int rank, int from, int to);

  // A put by the channel's owner into its peer (the peer's doorman lets it in), along `route`.
  void notePut(int rank, int ch, int route) {
    noteSend(rank, chans_[rank][ch].owner, chans_[rank][ch].peer, ch, route);
  }
  void noteSend(int rank, int wid, int peer, int ch, int route) {
    sendsTo_.emplace_back(rank, wid, peer);
    if (route >= 0) chans_[rank][ch].route = route;
  }

  static Op control(OpCode code, int ch) {
    Op op{};
    op.code = code;
    op.channel = channelId(ch);
    op.count = 1;
    return op;
  }
  static uint16_t channelId(int ch) {
    if (ch > std::numeric_limits<uint16_t>::max()) {
      throw std::invalid_argument("tree plan: channel id " + std::to_string(ch) +
                                  " does not fit the op record (0 .. 65535)");
    }
    return static_cast<uint16_t>(ch);
  }

  // tree_plan._Program.emit: the doormen and entry waits, then the result.
  TreeCompileResult emit(int64_t scratchEnd);

 private:
  struct Channel {
    int peer, owner, route;
  };
  std::pair<int, int> channelPair(int a, int b);

  bool compact_;
  const std::vector<int>& reverse_;
  std::vector<std::unordered_map<int64_t, int>> workerIds_;
  std::vector<std::vector<std::vector<Op>>> items_;  // rank -> worker -> ops
  std::vector<std::vector<Channel>> chans_;
  std::unordered_map<ChannelKey, std::pair<int, int>, ChannelKeyHash> channels_;
  std::map<std::tuple<int, int, int>, std::pair<int, int>> loopbacks_;
  std::vector<std::tuple<int, int, int>> sendsTo_;
};

}  // namespace forestcc::plan::trees
