// The tree compiler (tree_compiler.hpp): the worker keys, the choice of worker levels and lanes,
// and the up and down phases that turn segments into ops; compileTrees, its entry point. The
// forest's segments (tree_segments), the lanes' pieces (tree_lanes) and the programs being
// written (tree_program) are in their own files; this one decides what goes into the programs.
#include "plan/tree_compiler.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

#include "plan/tree_lanes.hpp"
#include "plan/tree_program.hpp"
#include "plan/tree_segments.hpp"

namespace forestcc::plan {

namespace trees {

namespace {

// Worker keys (tree_plan.py's tuples as integers): a root's sender, a root's reducer, and per
// group of tree levels one down worker and one up worker.
constexpr int64_t kRootKey = -1;    // ("root",)
constexpr int64_t kUpRootKey = -2;  // ("up-root",)
int64_t downKey(int level) { return 2 * int64_t{level}; }
int64_t upKey(int level) { return 2 * int64_t{level} + 1; }
// _channels_per_peer's other kinds of channel end: ("entry", key) and "doorman".
constexpr int64_t kEntryOffset = int64_t{1} << 40;
constexpr int64_t kDoormanKey = -(int64_t{1} << 41);


uint32_t fits32(int64_t value, const char* what) {
  if (value < 0 || value > std::numeric_limits<uint32_t>::max()) {
    throw std::invalid_argument(std::string("tree plan: ") + what + " " + std::to_string(value) +
                                " does not fit the op record (0 .. 2^32-1)");
  }
  return static_cast<uint32_t>(value);
}

ChunkRef ref(Buffer buffer, int64_t index) { return ChunkRef{buffer, fits32(index, "chunk index")}; }

class Compiler {
 public:
  Compiler(const std::vector<TreeInput>& trees, const TreeCompileOptions& o)
      : o_(o), forest_(trees, o.nranks, o.chunksPerBlock, o.reverseRoute.size()), prog_(o),
        segs_(buildSegments(forest_, trees.size(), o.nranks, o.reverseRoute)),
        k_(o.chunksPerBlock) {}

  TreeCompileResult run() {
    int maxDepth = 0;
    for (const Segment& s : segs_) maxDepth = std::max(maxDepth, s.depth);
    while (!o_.compact && channelsPerPeer() > o_.maxChannelsPerPeer && levels_ <= maxDepth) ++levels_;
    if (!o_.compact) planLanes();
    if (o_.collective != Collective::AllGather) upPhase();
    if (o_.collective != Collective::ReduceScatter) downPhase();
    return prog_.emit(scratchEnd_);
  }

 private:
  int level(int seg) const { return (segs_[seg].depth - 1) / levels_; }
  int64_t recvKey(int seg) const { return downKey(level(seg)); }
  int64_t sendKey(int seg) const { return segs_[seg].parent < 0 ? kRootKey : recvKey(segs_[seg].parent); }
  int64_t upKeyOf(int seg) const { return upKey(level(seg)); }
  int64_t upParentKey(int seg) const {
    return segs_[seg].parent < 0 ? kUpRootKey : upKeyOf(segs_[seg].parent);
  }
  int rootOf(int seg) const { return forest_.tree(segs_[seg].t0).root; }

  ChunkRef resultRef(int root, int64_t chunk) const {
    return ref(Buffer::Output, o_.collective == Collective::AllGather ? root * k_ + chunk : chunk);
  }
  ChunkRef inputRef(int root, int64_t chunk) const {
    return ref(Buffer::Input, o_.collective == Collective::ReduceScatter ? root * k_ + chunk : chunk);
  }

  // tree_plan._channels_per_peer (pipelined mode only).
  int channelsPerPeer() const {
    int most = 0;
    for (const auto& [pair, count] : channelsPerPair()) most = std::max(most, count);
    return most;
  }

  // tree_plan._channels_per_pair: {(a, b), a < b: the channels a and b share}.
  std::map<std::pair<int, int>, int> channelsPerPair() const {
    std::vector<std::tuple<int, int, int64_t, int64_t, int>> keys;
    auto add = [&](int a, int64_t wa, int b, int64_t wb, int route, int back) {
      if (b < a) keys.emplace_back(b, a, wb, wa, back);
      else keys.emplace_back(a, b, wa, wb, route);
    };
    const bool down = o_.collective != Collective::ReduceScatter;
    const bool up = o_.collective != Collective::AllGather;
    for (int s = 0; s < int(segs_.size()); ++s) {
      const Segment& seg = segs_[s];
      if (down) {
        add(seg.sender, sendKey(s), seg.receiver, recvKey(s), seg.route, seg.back);
        add(seg.sender, kEntryOffset + sendKey(s), seg.receiver, kDoormanKey, -1, -1);
      }
      if (up) {
        add(seg.receiver, upKeyOf(s), seg.sender, upParentKey(s), seg.back, seg.route);
        add(seg.receiver, kEntryOffset + upKeyOf(s), seg.sender, kDoormanKey, -1, -1);
      }
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::map<std::pair<int, int>, int> out;
    for (const auto& key : keys) ++out[{std::get<0>(key), std::get<1>(key)}];
    return out;
  }

  PairKey pairOf(int s) const {
    const Segment& seg = segs_[s];
    return PairKey{seg.sender, sendKey(s), seg.receiver, recvKey(s), seg.route};
  }

  // tree_plan._lanes: the spare channels of each rank pair, one at a time, to the worker pair
  // with the most chunks per lane, until a chunk per lane; worker pairs on direct routes only.
  void planLanes() {
    const int64_t cost = o_.collective == Collective::AllReduce ? 2 : 1;
    std::vector<PairKey> order;  // worker pairs in order of first appearance
    std::unordered_map<PairKey, int64_t, PairKeyHash> loads;
    for (int s = 0; s < int(segs_.size()); ++s) {
      const Segment& seg = segs_[s];
      if (seg.route < 0 || o_.directRoute.empty() || !o_.directRoute[seg.route]) continue;
      const PairKey key = pairOf(s);
      auto [it, added] = loads.try_emplace(key, 0);
      if (added) order.push_back(key);
      it->second += seg.hi - seg.lo;
    }
    if (order.empty()) return;
    std::map<std::pair<int, int>, std::vector<PairKey>> byPair;
    for (const PairKey& key : order) {
      byPair[{std::min(key.sender, key.receiver), std::max(key.sender, key.receiver)}].push_back(key);
    }
    const auto used = channelsPerPair();
    for (const auto& [pair, keys] : byPair) {
      auto found = used.find(pair);
      int64_t spare = o_.maxChannelsPerPeer - (found == used.end() ? 0 : found->second);
      std::vector<int64_t> count(keys.size(), 1);
      while (spare >= cost) {
        int best = -1;
        for (size_t i = 0; i < keys.size(); ++i) {
          const int64_t load = loads.at(keys[i]);
          if (load <= count[i]) continue;  // a chunk per lane already
          if (best < 0 || load * count[best] > loads.at(keys[best]) * count[i]) best = int(i);
        }
        if (best < 0) break;
        ++count[best];
        spare -= cost;
      }
      for (size_t i = 0; i < keys.size(); ++i) {
        if (count[i] > 1) lanes_.emplace(keys[i], Lanes{count[i], loads.at(keys[i])});
      }
    }
  }

  Op dataOp(OpCode code, int ch, int64_t n) const {
    Op op{};
    op.code = code;
    op.channel = ch < 0 ? 0 : Program::channelId(ch);
    op.count = fits32(n, "chunk count");
    return op;
  }

  // tree_plan._reduce: dst = reduction of srcs, folded into ops of at most kMaxReduceSources.
  void reduce(int rank, int w, ChunkRef dst, std::vector<ChunkRef> srcs, int64_t n, int ch = -1,
              ChunkRef remote = {}) {
    auto withSources = [&](Op op, size_t from, size_t to) {
      op.dst = dst;
      op.sourceCount = uint8_t(to - from);
      for (size_t i = from; i < to; ++i) op.sources[i - from] = srcs[i];
      return op;
    };
    while (srcs.size() > size_t(kMaxReduceSources)) {
      prog_.ops(rank, w).push_back(withSources(dataOp(OpCode::Reduce, -1, n), 0, kMaxReduceSources));
      std::vector<ChunkRef> rest{dst};
      rest.insert(rest.end(), srcs.begin() + kMaxReduceSources, srcs.end());
      srcs = std::move(rest);
    }
    if (ch < 0) {
      prog_.ops(rank, w).push_back(withSources(dataOp(OpCode::Reduce, -1, n), 0, srcs.size()));
    } else {
      Op op = withSources(dataOp(OpCode::ReducePut, ch, n), 0, srcs.size());
      op.remote = remote;
      prog_.ops(rank, w).push_back(op);
    }
  }

  void signalAfter(int rank, int w, int ch) {
    Op& last = prog_.ops(rank, w).back();
    if (last.code == OpCode::Put && last.channel == ch) last.code = OpCode::PutSignal;
    else prog_.ops(rank, w).push_back(Program::control(OpCode::Signal, ch));
  }

  struct Item {
    int64_t order0;
    int order1;
    int rank;
    int seg;  // the incoming (down) or sent (up) segment; -1 at the root
    const std::vector<int>* others;  // contributions (up) or outgoing segments (down)
    int root;
    int64_t lo, hi;
  };

  static void sortItems(std::vector<Item>& items) {
    std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      return std::tie(a.order0, a.order1, a.rank) < std::tie(b.order0, b.order1, b.rank);
    });
  }

  // tree_plan._up_phase.
  void upPhase() {
    std::vector<std::vector<int64_t>> freeBlock(o_.nranks);
    std::vector<int64_t> slot(segs_.size());
    for (size_t s = 0; s < segs_.size(); ++s) {
      const Segment& seg = segs_[s];
      std::vector<int64_t>& free = freeBlock[seg.sender];
      if (free.empty()) free.assign(size_t(k_), 0);
      const int64_t block = *std::max_element(free.begin() + seg.lo, free.begin() + seg.hi);
      std::fill(free.begin() + seg.lo, free.begin() + seg.hi, block + 1);
      slot[s] = block * k_ + seg.lo;
      scratchEnd_ = std::max(scratchEnd_, slot[s] + seg.hi - seg.lo);
    }
    std::vector<int> rootOrder;
    std::vector<std::vector<int>> byRoot(o_.nranks);
    for (int s = 0; s < int(segs_.size()); ++s) {
      if (segs_[s].parent >= 0) continue;
      if (byRoot[segs_[s].sender].empty()) rootOrder.push_back(segs_[s].sender);
      byRoot[segs_[s].sender].push_back(s);
    }
    std::vector<Item> items;
    items.reserve(segs_.size() + rootOrder.size());
    for (int s = 0; s < int(segs_.size()); ++s) {
      const Segment& seg = segs_[s];
      items.push_back({-seg.depth, seg.t1 - 1, seg.receiver, s, &seg.children, rootOf(s), seg.lo, seg.hi});
    }
    for (int root : rootOrder) {
      Item item{0, -1, root, -1, &byRoot[root], root, std::numeric_limits<int64_t>::max(), 0};
      for (int s : byRoot[root]) {
        item.order1 = std::max(item.order1, segs_[s].t1 - 1);
        item.lo = std::min(item.lo, segs_[s].lo);
        item.hi = std::max(item.hi, segs_[s].hi);
      }
      items.push_back(item);
    }
    sortItems(items);
    std::vector<int> incoming;
    std::vector<int64_t> bounds;
    std::vector<ChunkRef> srcs;
    std::unordered_map<PairKey, int64_t, PairKeyHash> placed;
    std::vector<Piece> pieces;
    std::vector<std::vector<int>> sentOn(segs_.size());  // the lanes a segment's sums went up on
    for (const Item& item : items) {
      const int x = item.rank;
      const int w = prog_.worker(x, item.seg < 0 ? kUpRootKey : upKeyOf(item.seg));
      incoming = *item.others;
      std::stable_sort(incoming.begin(), incoming.end(), [&](int a, int b) {
        return std::make_pair(segs_[a].t1 - 1, segs_[a].receiver) <
               std::make_pair(segs_[b].t1 - 1, segs_[b].receiver);
      });
      for (int child : incoming) {
        const Segment& c = segs_[child];
        const int cw = prog_.worker(c.receiver, upKeyOf(child));
        for (int lane : sentOn[child]) {
          const int ch = prog_.channel(c.receiver, cw, x, w, c.back, lane).second;
          prog_.ops(x, w).push_back(Program::control(OpCode::Wait, ch));
        }
        std::vector<int>().swap(sentOn[child]);
      }
      bounds = {item.lo, item.hi};
      for (int s : incoming) {
        bounds.push_back(segs_[s].lo);
        bounds.push_back(segs_[s].hi);
      }
      std::sort(bounds.begin(), bounds.end());
      bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
      // The reduction's pieces: (first chunk, chunks, sources).
      auto sourcesAt = [&](int64_t a, int64_t z) {
        srcs.clear();
        for (int s : incoming) {
          if (segs_[s].lo <= a && z <= segs_[s].hi) srcs.push_back(ref(Buffer::Scratch, slot[s] + a - segs_[s].lo));
        }
      };
      if (item.seg < 0) {  // the root: reduce into the output
        for (size_t i = 0; i + 1 < bounds.size(); ++i) {
          const int64_t a = bounds[i], n = bounds[i + 1] - a;
          sourcesAt(a, bounds[i + 1]);
          const ChunkRef own = inputRef(item.root, a);
          const ChunkRef dst = resultRef(item.root, a);
          if (!srcs.empty()) {
            std::vector<ChunkRef> all{own};
            all.insert(all.end(), srcs.begin(), srcs.end());
            reduce(x, w, dst, std::move(all), n);
          } else if (!o_.inPlace) {
            Op op = dataOp(OpCode::Copy, -1, n);
            op.src = own;
            op.dst = dst;
            prog_.ops(x, w).push_back(op);
          }
        }
        continue;
      }
      const Segment& sent = segs_[item.seg];
      const int parentW = prog_.worker(sent.sender, upParentKey(item.seg));
      const int64_t remoteBase = slot[item.seg] - sent.lo;
      lanePieces(lanes_, placed, pairOf(item.seg), item.lo, item.hi, pieces);
      std::vector<int>& usedLanes = sentOn[item.seg];
      for (const Piece& piece : pieces) {
        const int chUp = prog_.channel(x, w, sent.sender, parentW, sent.back, piece.lane).first;
        usedLanes.push_back(piece.lane);
        for (size_t i = 0; i + 1 < bounds.size(); ++i) {
          const int64_t b = std::max(bounds[i], piece.lo), z = std::min(bounds[i + 1], piece.hi);
          if (b >= z) continue;
          sourcesAt(bounds[i], bounds[i + 1]);
          for (ChunkRef& src : srcs) src.index = fits32(src.index + (b - bounds[i]), "chunk index");
          const ChunkRef own = inputRef(item.root, b);
          const ChunkRef remote = ref(Buffer::Scratch, remoteBase + b);
          if (!srcs.empty()) {
            std::vector<ChunkRef> all = srcs;
            all.push_back(own);
            reduce(x, w, srcs[0], std::move(all), z - b, chUp, remote);
          } else {
            Op op = dataOp(OpCode::Put, chUp, z - b);
            op.src = own;
            op.dst = remote;
            prog_.ops(x, w).push_back(op);
          }
        }
        prog_.notePut(x, chUp, sent.back);
        signalAfter(x, w, chUp);
      }
    }
  }

  // tree_plan._down_phase.
  void downPhase() {
    std::vector<int> rootOrder;
    std::vector<std::vector<int>> senders(o_.nranks);
    for (int s = 0; s < int(segs_.size()); ++s) {
      if (segs_[s].parent >= 0) continue;
      const int root = segs_[s].sender;
      if (senders[root].empty()) rootOrder.push_back(root);
      senders[root].push_back(prog_.worker(root, sendKey(s)));
    }
    for (int root : rootOrder) {
      if (o_.collective == Collective::AllReduce) {
        std::vector<int> distinct;
        for (int w : senders[root]) {
          if (std::find(distinct.begin(), distinct.end(), w) == distinct.end()) distinct.push_back(w);
        }
        for (int w : distinct) prog_.handover(root, prog_.worker(root, kUpRootKey), w);
      }
      if (o_.collective == Collective::AllGather && !o_.inPlace) {
        Op op = dataOp(OpCode::Copy, -1, k_);
        op.src = ref(Buffer::Input, 0);
        op.dst = ref(Buffer::Output, root * k_);
        prog_.ops(root, senders[root][0]).push_back(op);
      }
    }
    std::vector<std::vector<int>> single;  // a root segment as a one-element outgoing list
    single.reserve(segs_.size());
    std::vector<Item> items;
    for (int s = 0; s < int(segs_.size()); ++s) {
      const Segment& seg = segs_[s];
      items.push_back({seg.depth, seg.t0, seg.receiver, s, &seg.children, 0, 0, 0});
      if (seg.parent < 0) {
        single.push_back({s});
        items.push_back({0, seg.t0, seg.sender, -1, &single.back(), 0, 0, 0});
      }
    }
    sortItems(items);
    // (channel, worker) on the receiver, per piece of the segment (one unless it has lanes)
    std::vector<std::vector<std::pair<int, int>>> arrival(segs_.size());
    const bool fromInput = o_.collective == Collective::AllGather;
    std::vector<int> outgoing;
    std::unordered_map<PairKey, int64_t, PairKeyHash> placed;
    std::vector<Piece> pieces;
    for (const Item& item : items) {
      const int x = item.rank;
      if (item.seg >= 0) {
        for (const auto& [ch, w] : arrival[item.seg]) prog_.ops(x, w).push_back(Program::control(OpCode::Wait, ch));
        std::vector<std::pair<int, int>>().swap(arrival[item.seg]);
      }
      outgoing = *item.others;
      if (outgoing.size() > 1) {
        std::stable_sort(outgoing.begin(), outgoing.end(), [&](int a, int b) {
          return std::make_pair(segs_[a].t0, segs_[a].receiver) <
                 std::make_pair(segs_[b].t0, segs_[b].receiver);
        });
      }
      for (int s : outgoing) {
        const Segment& seg = segs_[s];
        const int w = prog_.worker(x, sendKey(s));
        const int childW = prog_.worker(seg.receiver, recvKey(s));
        lanePieces(lanes_, placed, pairOf(s), seg.lo, seg.hi, pieces);
        for (const Piece& piece : pieces) {
          const auto [ch, childCh] = prog_.channel(x, w, seg.receiver, childW, seg.route, piece.lane);
          arrival[s].emplace_back(childCh, childW);
          const ChunkRef at = resultRef(rootOf(s), piece.lo);
          Op op = dataOp(OpCode::PutSignal, ch, piece.hi - piece.lo);
          op.src = item.seg < 0 && fromInput ? ref(Buffer::Input, piece.lo) : at;
          op.dst = at;
          prog_.ops(x, w).push_back(op);
          prog_.noteSend(x, w, seg.receiver, ch, seg.route);
        }
      }
    }
  }

  const TreeCompileOptions& o_;
  Forest forest_;
  Program prog_;
  std::vector<Segment> segs_;
  int64_t k_;
  int levels_ = 1;
  int64_t scratchEnd_ = 0;
  LaneTable lanes_;
};

}  // namespace

}  // namespace trees

TreeCompileResult compileTrees(const std::vector<TreeInput>& trees, const TreeCompileOptions& options) {
  if (options.collective != Collective::AllGather && options.collective != Collective::ReduceScatter &&
      options.collective != Collective::AllReduce) {
    throw std::invalid_argument(std::string("tree plans implement all_gather, reduce_scatter, all_reduce, not ") +
                                name(options.collective));
  }
  for (int reverse : options.reverseRoute) {
    if (reverse < 0 || reverse >= int64_t(options.reverseRoute.size())) {
      throw std::invalid_argument("tree plan: reverse route id " + std::to_string(reverse) + " unknown");
    }
  }
  // A short list would leave routes silently without lanes (planLanes reads past it as "not direct").
  if (!options.directRoute.empty() && options.directRoute.size() != options.reverseRoute.size()) {
    throw std::invalid_argument("tree plan: " + std::to_string(options.directRoute.size()) + " direct-route flags for " +
                                std::to_string(options.reverseRoute.size()) + " routes");
  }
  return trees::Compiler(trees, options).run();
}

}  // namespace forestcc::plan
