#include "graph/switch_removal.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>

namespace forestcc::graph {

namespace {

class SwitchRemoval {
 public:
  SwitchRemoval(const Network& net, const std::vector<Cap>& caps, Cap k)
      : net_(net), n_(net.n), k_(k), cap_(static_cast<size_t>(n_) * n_, 0), pieces_(cap_.size()), outs_(n_) {
    need_ = checkedCap(Wide(net.computeCount()) * k, "N*k");
    for (size_t i = 0; i < net.arcs.size(); ++i) {
      const Arc& a = net.arcs[i];
      if (caps[i] <= 0) continue;
      cap_[idx(a.src, a.dst)] = caps[i];
      outs_[a.src].push_back(a.dst);
      pieces_[idx(a.src, a.dst)].push_back({pathId({a.src, a.dst}), caps[i]});
    }
  }

  SwitchFreeGraph run() {
    std::vector<int> switches;
    for (int v = 0; v < n_; ++v)
      if (!net_.compute[v]) switches.push_back(v);
    // Small switches first: their splits are cheap and leave fewer arcs behind.
    std::vector<int> degree(n_, 0);
    for (const Arc& a : net_.arcs) ++degree[a.src], ++degree[a.dst];
    std::stable_sort(switches.begin(), switches.end(),
                     [&](int a, int b) { return degree[a] < degree[b]; });
    for (int w : switches) isolate(w);
    return result();
  }

 private:
  size_t idx(int u, int v) const { return static_cast<size_t>(u) * n_ + v; }

  int pathId(std::vector<int> path) {
    auto [it, fresh] = pathIds_.emplace(std::move(path), static_cast<int>(paths_.size()));
    if (fresh) paths_.push_back(it->first);
    return it->second;
  }

  // maxflow from the super source (feeding each compute node k, plus `sources` unboundedly) to
  // `sinks`, stopped at `limit`. On return below the limit, *sinkSide holds the largest sink side.
  Cap flowTo(const std::vector<int>& sources, const std::vector<int>& sinks, Cap limit,
             std::vector<char>* sinkSide) {
    const int s = n_, t = n_ + 1;
    flow_.reset(n_ + 2);
    // The working graph is sparse (switch degrees, then the arcs splitting made): walk the
    // adjacency lists, dropping arcs that splitting emptied, instead of the dense n*n matrix.
    for (int u = 0; u < n_; ++u) {
      std::vector<int>& list = outs_[u];
      size_t kept = 0;
      for (int v : list) {
        const Cap c = cap_[idx(u, v)];
        if (c <= 0) continue;
        list[kept++] = v;
        flow_.addArc(u, v, c);
      }
      list.resize(kept);
    }
    for (int c : net_.computeNodes) flow_.addArc(s, c, k_);
    for (int x : sources) flow_.addArc(s, x, kInfiniteCap);
    for (int y : sinks) flow_.addArc(y, t, kInfiniteCap);
    ++stats().maxflows;
    Cap value = flow_.run(s, t, limit);
    if (value < limit && sinkSide) {
      std::vector<char> side = flow_.sourceSide();
      sinkSide->assign(n_, 0);
      for (int v = 0; v < n_; ++v) (*sinkSide)[v] = !side[v];
    }
    return value;
  }

  // min(want, smallest surplus ρ(X) − k·|Vc \ X| over sets X that contain `sinks` and a compute
  // node and avoid `sources`). One max-flow answers it unless the largest minimum cut it finds
  // holds no compute node (a set of switches whose in-capacity fell below N·k as splitting went
  // on: common at leaf switches); then every compute node c is tried as an extra sink.
  Cap familySlack(const std::vector<int>& sources, const std::vector<int>& sinks, Cap want) {
    const Cap limit = need_ + want;
    std::vector<char> side;
    Cap value = flowTo(sources, sinks, limit, &side);
    if (value >= limit) return want;
    bool holdsCompute = false;
    for (int c : net_.computeNodes) holdsCompute |= side[c] != 0;
    if (holdsCompute) {
      // X has surplus value - need_; once that much is split off, X is tight, and surpluses never
      // grow again during splitting, so X rules out later pairs without another max-flow.
      tight_.push_back(std::move(side));
      return std::max<Cap>(0, value - need_);
    }
    // A maximum flow to `sinks` plus c is this flow plus what still reaches c, so each c costs one
    // augmentation from the saved residual network, capped at what could still lower `best`.
    const Cap floor = std::max<Cap>(0, value - need_);  // no c can do better than this
    const int t = n_ + 1;
    Cap best = want;
    flow_.save(saved_);
    for (int c : net_.computeNodes) {
      if (best == floor) break;
      if (std::find(sources.begin(), sources.end(), c) != sources.end()) continue;
      flow_.addArc(c, t, kInfiniteCap);
      ++stats().maxflows;
      const Cap extra = flow_.run(n_, t, need_ + best - value);
      best = std::min(best, std::max<Cap>(0, value + extra - need_));
      flow_.restore(saved_);
    }
    return best;
  }

  // True when a remembered tight set is one that splitting (u,w),(w,t) would lower.
  bool blocked(int u, int w, int t) const {
    for (const std::vector<char>& X : tight_) {
      if (X[w] && !X[u] && !X[t]) return true;
      if (!X[w] && X[u] && X[t]) return true;
    }
    return false;
  }

  // Largest c <= want that can move from (u,w),(w,t) to (u,t). Splitting lowers the in-capacity of
  // exactly two kinds of sets: X ∋ w with u,t ∉ X, and X ⊇ {u,t} with w ∉ X.
  Cap admissible(int u, int w, int t, Cap want) {
    if (blocked(u, w, t)) return 0;
    Cap c = familySlack(u == t ? std::vector<int>{u} : std::vector<int>{u, t}, {w}, want);
    if (c == 0) return 0;
    return familySlack({w}, u == t ? std::vector<int>{u} : std::vector<int>{u, t}, c);
  }

  // Removes `amount` capacity units from the routes of arc (u,v), last pieces first.
  std::vector<PathPiece> take(int u, int v, Cap amount) {
    std::vector<PathPiece>& list = pieces_[idx(u, v)];
    std::vector<PathPiece> taken;
    while (amount > 0) {
      PathPiece& last = list.back();
      Cap part = std::min(amount, last.amount);
      taken.push_back({last.path, part});
      last.amount -= part;
      amount -= part;
      if (last.amount == 0) list.pop_back();
    }
    return taken;
  }

  void addPiece(int u, int v, PathPiece piece) {
    for (PathPiece& p : pieces_[idx(u, v)]) {
      if (p.path == piece.path) {
        p.amount += piece.amount;
        return;
      }
    }
    pieces_[idx(u, v)].push_back(piece);
  }

  void split(int u, int w, int t, Cap amount) {
    cap_[idx(u, w)] -= amount;
    cap_[idx(w, t)] -= amount;
    std::vector<PathPiece> first = take(u, w, amount), second = take(w, t, amount);
    if (u == t) return;  // a loop carries nothing: its capacity is dropped
    if (cap_[idx(u, t)] == 0) outs_[u].push_back(t);
    cap_[idx(u, t)] += amount;
    // Pair the routes into w with the routes out of w, unit for unit.
    size_t i = 0, j = 0;
    while (i < first.size() && j < second.size()) {
      Cap part = std::min(first[i].amount, second[j].amount);
      std::vector<int> path = paths_[first[i].path];
      const std::vector<int>& tail = paths_[second[j].path];
      path.insert(path.end(), tail.begin() + 1, tail.end());
      addPiece(u, t, {pathId(std::move(path)), part});
      if ((first[i].amount -= part) == 0) ++i;
      if ((second[j].amount -= part) == 0) ++j;
    }
  }

  void dropArcsAt(int w) {
    for (int v = 0; v < n_; ++v) {
      cap_[idx(w, v)] = cap_[idx(v, w)] = 0;
      pieces_[idx(w, v)].clear();
      pieces_[idx(v, w)].clear();
    }
  }

  // Per node: which part of the network it lies in once w is gone (nodes joined by arcs with
  // capacity, not through w; a part is what one node reaches, so with one-way links the parts
  // depend on the order, which only changes how splits are ordered, never their exactness).
  std::vector<int> partsWithout(int w) const {
    std::vector<int> part(n_, -1);
    int count = 0;
    for (int start = 0; start < n_; ++start) {
      if (start == w || part[start] >= 0) continue;
      std::vector<int> stack{start};
      part[start] = count;
      while (!stack.empty()) {
        int v = stack.back();
        stack.pop_back();
        for (int x : outs_[v]) {  // out-arcs only: enough to tell the boxes apart, and sparse
          if (x == w || part[x] >= 0 || cap_[idx(v, x)] <= 0) continue;
          part[x] = count;
          stack.push_back(x);
        }
      }
      ++count;
    }
    return part;
  }

  // The order in which u's arc into w is split over w's out-arcs: one target from each part of
  // the network in turn (u's own part last, the others from the one after u's), and within a part
  // from the node after u. Where w is all that joins the parts (the switch between MI250 boxes),
  // each rank's share then reaches every other part directly, so a tree can enter every other box
  // straight from its root instead of through ranks the packing reaches later (deeper trees).
  std::vector<int> spreadOrder(int u, const std::vector<int>& outs, const std::vector<int>& part) const {
    const int parts = *std::max_element(part.begin(), part.end()) + 1;
    std::vector<std::vector<int>> byPart(parts);
    const size_t from = std::upper_bound(outs.begin(), outs.end(), u) - outs.begin();
    for (size_t b = 0; b < outs.size(); ++b) {
      int t = outs[(from + b) % outs.size()];
      byPart[part[t]].push_back(t);
    }
    std::vector<int> order;
    std::vector<size_t> next(parts, 0);
    const int own = part[u];
    for (bool more = true; more;) {
      more = false;
      for (int i = 1; i <= parts; ++i) {
        int q = (own + i) % parts;  // u's own part comes last in every round
        if (next[q] < byPart[q].size()) {
          order.push_back(byPart[q][next[q]++]);
          more = true;
        }
      }
    }
    return order;
  }

  void isolate(int w) {
    const std::vector<int> part = partsWithout(w);
    // First pass: spread each in-arc over the out-arcs in fair shares, so logical arcs fan out (short
    // trees); later passes move whatever is admissible.
    for (int pass = 0;; ++pass) {
      std::vector<int> ins, outs;
      for (int v = 0; v < n_; ++v) {
        if (cap_[idx(v, w)] > 0) ins.push_back(v);
        if (cap_[idx(w, v)] > 0) outs.push_back(v);
      }
      if (ins.empty() || outs.empty()) {
        // With no way in (or out), the remaining arcs at w can carry no flow between compute nodes.
        dropArcsAt(w);
        break;
      }
      bool progress = false;
      for (size_t a = 0; a < ins.size(); ++a) {
        int u = ins[a];
        const std::vector<int> targets = spreadOrder(u, outs, part);
        const Cap others = static_cast<Cap>(outs.size()) - (cap_[idx(w, u)] > 0 ? 1 : 0);
        Cap share = others > 0 ? (cap_[idx(u, w)] + others - 1) / others : cap_[idx(u, w)];
        // Whole multiples of k let a group of k identical trees share one logical arc unsplit.
        if (share < k_) share = std::min(k_, cap_[idx(u, w)]);
        else share = (share + k_ - 1) / k_ * k_;
        for (int t : targets) {
          if (t == u || cap_[idx(u, w)] == 0 || cap_[idx(w, t)] == 0) continue;
          Cap want = std::min(cap_[idx(u, w)], cap_[idx(w, t)]);
          if (pass == 0) want = std::min(want, share);
          Cap amount = admissible(u, w, t, want);
          if (amount > 0) {
            split(u, w, t, amount);
            progress = true;
          }
        }
      }
      if (progress || pass == 0) continue;
      for (int u : ins) {  // only loops are left to try
        Cap want = std::min(cap_[idx(u, w)], cap_[idx(w, u)]);
        if (want == 0) continue;
        Cap amount = admissible(u, w, u, want);
        if (amount > 0) {
          split(u, w, u, amount);
          progress = true;
        }
      }
      if (!progress)
        throw std::runtime_error("switch removal is stuck at node " + std::to_string(w) +
                                 " (its in- and out-bandwidth differ?)");
    }
    removed_.resize(n_, 0);
    removed_[w] = 1;
  }

  SwitchFreeGraph result() {
    SwitchFreeGraph g;
    g.count = net_.computeCount();
    g.nodes = net_.computeNodes;
    g.cap.assign(static_cast<size_t>(g.count) * g.count, 0);
    g.pieces.resize(g.cap.size());
    for (int a = 0; a < g.count; ++a) {
      for (int b = 0; b < g.count; ++b) {
        size_t from = idx(g.nodes[a], g.nodes[b]), to = static_cast<size_t>(a) * g.count + b;
        g.cap[to] = cap_[from];
        g.pieces[to] = std::move(pieces_[from]);
      }
    }
    g.paths = std::move(paths_);
    return g;
  }

  const Network& net_;
  int n_;
  Cap k_, need_;
  std::vector<Cap> cap_;                      // dense n*n working capacities
  std::vector<std::vector<PathPiece>> pieces_;  // dense n*n routes of each working arc
  std::vector<std::vector<int>> outs_;  // out-neighbours of each node (some may have emptied)
  MaxFlow::Saved saved_;
  std::vector<std::vector<int>> paths_;
  std::map<std::vector<int>, int> pathIds_;
  std::vector<char> removed_;
  std::vector<std::vector<char>> tight_;  // sets with zero surplus (each holds a compute node)
  MaxFlow flow_;
};

}  // namespace

SwitchFreeGraph removeSwitches(const Network& net, const std::vector<Cap>& caps, Cap k) {
  auto start = std::chrono::steady_clock::now();
  SwitchFreeGraph g = SwitchRemoval(net, caps, k).run();
  stats().secondsSplit +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return g;
}

}  // namespace forestcc::graph
