// Lanes of the tree compiler (tree_compiler.cpp; tree_plan._lanes, _lane_pieces): a heavy
// down-phase worker pair on a direct link spreads its puts over spare channels, its lanes, and the
// up phase spreads the mirrored pair's puts alike (Compiler::upPhase asks with the same key). Here
// the pair's key, its lane count and the cut of a segment's chunks into per-lane pieces; which
// pairs get how many lanes is the compiler's choice (Compiler::planLanes), since it needs the
// worker keys and channel counts. A header alone: a few small types and one short function.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace forestcc::plan::trees {

// A down-phase worker pair (tree_plan._lanes' key): sender and its worker key, receiver and its
// worker key, route.
struct PairKey {
  int sender;
  int64_t sendKey;
  int receiver;
  int64_t recvKey;
  int route;
  bool operator==(const PairKey& o) const {
    return sender == o.sender && sendKey == o.sendKey && receiver == o.receiver &&
           recvKey == o.recvKey && route == o.route;
  }
};
struct PairKeyHash {
  size_t operator()(const PairKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : {int64_t(k.sender), k.sendKey, int64_t(k.receiver), k.recvKey, int64_t(k.route)}) {
      h = (h ^ uint64_t(v)) * 1099511628211ull;
    }
    return size_t(h);
  }
};
struct Lanes {
  int64_t count;   // lanes
  int64_t chunks;  // the pair's chunks per slice
};
using LaneTable = std::unordered_map<PairKey, Lanes, PairKeyHash>;

struct Piece {
  int lane;
  int64_t lo, hi;
};

// tree_plan._lane_pieces: chunks lo..hi-1 of a segment of worker pair `key`, cut where its lanes
// change (position p of the pair's slice is in lane p*m / C); `placed` is advanced.
inline void lanePieces(const LaneTable& lanes, std::unordered_map<PairKey, int64_t, PairKeyHash>& placed,
                       const PairKey& key, int64_t lo, int64_t hi, std::vector<Piece>& out) {
  out.clear();
  auto it = lanes.find(key);
  if (it == lanes.end()) {
    out.push_back({0, lo, hi});
    return;
  }
  const int64_t m = it->second.count, total = it->second.chunks;
  int64_t& at = placed[key];
  const int64_t before = at;
  at += hi - lo;
  for (int64_t a = lo; a < hi;) {
    const int64_t pos = before + a - lo;
    const int64_t lane = pos * m / total;
    const int64_t z = std::min(hi, a + ((lane + 1) * total + m - 1) / m - pos);
    out.push_back({int(lane), a, z});
    a = z;
  }
}

}  // namespace forestcc::plan::trees
