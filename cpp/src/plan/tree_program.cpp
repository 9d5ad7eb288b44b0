// The per-rank programs of the tree compiler (tree_program.hpp): channel and loopback creation,
// and emit's doormen and entry waits.
#include "plan/tree_program.hpp"

#include <algorithm>

namespace forestcc::plan::trees {

std::pair<int, int> Program::channel(int a, int wa, int b, int wb, int routeAB, int lane) {
  const bool flip = std::make_pair(b, wb) < std::make_pair(a, wa);
  const ChannelKey key = flip ? ChannelKey{b, wb, a, wa, routeAB < 0 ? -1 : reverse_.at(routeAB), lane}
                              : ChannelKey{a, wa, b, wb, routeAB, lane};
  auto it = channels_.find(key);
  if (it == channels_.end()) {
    const auto pair = channelPair(key.x, key.y);
    chans_[key.x][pair.first].owner = key.wx;
    chans_[key.y][pair.second].owner = key.wy;
    it = channels_.emplace(key, pair).first;
  }
  const auto [p0, p1] = it->second;
  return flip ? std::make_pair(p1, p0) : std::make_pair(p0, p1);
}

void Program::handover(int rank, int from, int to) {
  if (from == to) return;
  auto it = loopbacks_.find({rank, from, to});
  if (it == loopbacks_.end()) {
    const auto pair = channelPair(rank, rank);
    chans_[rank][pair.first].owner = from;
    chans_[rank][pair.second].owner = to;
    it = loopbacks_.emplace(std::make_tuple(rank, from, to), pair).first;
  }
  ops(rank, from).push_back(control(OpCode::Signal, it->second.first));
  ops(rank, to).push_back(control(OpCode::Wait, it->second.second));
}

TreeCompileResult Program::emit(int64_t scratchEnd) {
  std::sort(sendsTo_.begin(), sendsTo_.end());
  sendsTo_.erase(std::unique(sendsTo_.begin(), sendsTo_.end()), sendsTo_.end());
  const int n = int(items_.size());
  std::vector<int> doorman(n, -1);
  std::map<std::tuple<int, int, int>, int> entry;  // (rank, worker, peer) -> entry channel on rank
  for (const auto& [rank, wid, peer] : sendsTo_) {
    if (doorman[peer] < 0) {
      doorman[peer] = int(items_[peer].size());
      items_[peer].emplace_back();
    }
    const auto [mine, theirs] = channelPair(rank, peer);
    entry[{rank, wid, peer}] = mine;
    items_[peer][doorman[peer]].push_back(control(OpCode::Signal, theirs));
  }
  TreeCompileResult out;
  out.scratchChunks = scratchEnd;
  out.ranks.resize(n);
  out.channelRoutes.resize(n);
  std::vector<int> entered(n, -1);
  int stamp = 0;
  for (int rank = 0; rank < n; ++rank) {
    RankProgram& program = out.ranks[rank];
    for (const Channel& c : chans_[rank]) {
      program.channels.push_back(ChannelSpec{c.peer, Transport::Auto});
      out.channelRoutes[rank].push_back(c.route);
    }
    program.workers.resize(items_[rank].size());
    for (size_t wid = 0; wid < items_[rank].size(); ++wid) {
      std::vector<Op>& queued = items_[rank][wid];
      std::vector<Op>& ops = program.workers[wid].ops;
      ops.reserve(queued.size() + 4);
      ++stamp;
      for (const Op& op : queued) {
        if (op.code == OpCode::Put || op.code == OpCode::PutSignal || op.code == OpCode::ReducePut) {
          const int peer = chans_[rank][op.channel].peer;
          if (entered[peer] != stamp) {
            entered[peer] = stamp;
            ops.push_back(control(OpCode::Wait, entry.at({rank, int(wid), peer})));
          }
        }
        ops.push_back(op);
      }
      std::vector<Op>().swap(queued);
    }
  }
  return out;
}

std::pair<int, int> Program::channelPair(int a, int b) {
  chans_[a].push_back({b, -1, -1});
  const int ca = int(chans_[a].size()) - 1;
  chans_[b].push_back({a, -1, -1});
  return {ca, int(chans_[b].size()) - 1};
}

}  // namespace forestcc::plan::trees
