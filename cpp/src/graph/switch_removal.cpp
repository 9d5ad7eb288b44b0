#include "graph/switch_removal.hpp"

#include "graph/second_core.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace forestcc::graph {

namespace {

// Plans tried per switch that each learn one set to keep their pairs out of (on the presets one or
// two suffice), then plans that learn every set their check finds (refusals' everySink), before
// the switch goes pair by pair: a fat tree's last leaf switch is refused by the pairs of its boxes,
// one pair per plan, and pair by pair it took most of the switch removal at 256 ranks (about 9,900
// of 10,734 max-flows) and ran for over 10 CPU minutes at 2,048 before it was stopped.
constexpr int kPlanAttempts = 4;
constexpr int kLearningAttempts = 4;

// From this many ranks on, a plan's check runs its flows into two sinks at once on two threads
// (below, one after the other): the flows of small networks are shorter than the hand-over.
// At 256 ranks the fat tree's switch removal took 0.20 s on one thread, 0.14 s on two.
constexpr int kTwoCoresFrom = 128;

class SwitchRemoval {
 public:
  SwitchRemoval(const Network& net, const std::vector<Cap>& caps, Cap k, bool batched)
      : net_(net), n_(net.n), k_(k), batched_(batched), cap_(static_cast<size_t>(n_) * n_, 0), pieces_(cap_.size()), outs_(n_),
        second_(net.computeCount() >= kTwoCoresFrom) {
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

  // A max-flow and what it ran, one per thread that checks plans (refusals).
  struct FlowWorker {
    MaxFlow flow;
    MaxFlow::Saved saved;
    long long maxflows = 0;
  };

  // Drops the arcs that splitting emptied from the adjacency lists, before flows read them.
  void compactLists() {
    for (int u = 0; u < n_; ++u) {
      std::vector<int>& list = outs_[u];
      list.erase(std::remove_if(list.begin(), list.end(),
                                [&](int v) { return cap_[idx(u, v)] <= 0; }),
                 list.end());
    }
  }

  void countFlows(FlowWorker& w) {
    stats().maxflows += w.maxflows;
    w.maxflows = 0;
  }

  // maxflow from the super source (feeding each compute node k, plus `sources` unboundedly) to
  // `sinks`, stopped at `limit`. On return below the limit, *sinkSide holds the largest sink side.
  // Reads the working graph only (several workers may run at once).
  Cap flowTo(FlowWorker& w, const std::vector<int>& sources, const std::vector<int>& sinks,
             Cap limit, std::vector<char>* sinkSide) const {
    const int s = n_, t = n_ + 1;
    w.flow.reset(n_ + 2);
    // The working graph is sparse (switch degrees, then the arcs splitting made): walk the
    // adjacency lists instead of the dense n*n matrix.
    for (int u = 0; u < n_; ++u)
      for (int v : outs_[u]) w.flow.addArc(u, v, cap_[idx(u, v)]);
    for (int c : net_.computeNodes) w.flow.addArc(s, c, k_);
    for (int x : sources) w.flow.addArc(s, x, kInfiniteCap);
    for (int y : sinks) w.flow.addArc(y, t, kInfiniteCap);
    ++w.maxflows;
    Cap value = w.flow.run(s, t, limit);
    if (value < limit && sinkSide) {
      std::vector<char> side = w.flow.sourceSide();
      sinkSide->assign(n_, 0);
      for (int v = 0; v < n_; ++v) (*sinkSide)[v] = !side[v];
    }
    return value;
  }

  // The smallest surplus ρ(X) − k·|Vc \ X| over sets X that contain `sinks` and a compute node and
  // avoid `sources`, as far as the callers need it: min(want, that surplus), where the search
  // stops once it has found a set at or below `enough` (that set's surplus is returned). One
  // max-flow answers it unless the largest minimum cut it finds holds no compute node (a set of
  // switches whose in-capacity fell below N·k as splitting went on: common at leaf switches, and
  // at a switch y in conditionHoldsAt); then every compute node c is tried as an extra sink, one
  // augmentation each from the saved flow, capped at what could still lower the answer.
  // *set: a set with the returned surplus, when it is below want; *fromCut: whether that set is
  // the first flow's minimum cut.
  Cap smallestSurplus(FlowWorker& w, const std::vector<int>& sources,
                      const std::vector<int>& sinks, Cap want, Cap enough, std::vector<char>* set,
                      bool* fromCut) const {
    const Cap limit = need_ + want;
    std::vector<char> side;
    const Cap value = flowTo(w, sources, sinks, limit, &side);
    *fromCut = false;
    if (value >= limit) return want;
    bool holdsCompute = false;
    for (int c : net_.computeNodes) holdsCompute |= side[c] != 0;
    if (holdsCompute) {
      *set = std::move(side);
      *fromCut = true;
      return value - need_;
    }
    // A maximum flow to `sinks` plus c is this flow plus what still reaches c.
    const Cap floor = std::max(value - need_, enough);  // no c can do better than value - need_
    const int t = n_ + 1;
    Cap best = want;
    w.flow.save(w.saved);
    for (int c : net_.computeNodes) {
      if (best <= floor) break;
      if (std::find(sources.begin(), sources.end(), c) != sources.end()) continue;
      w.flow.addArc(c, t, kInfiniteCap);
      ++w.maxflows;
      const Cap surplus = value + w.flow.run(n_, t, need_ + best - value) - need_;
      if (surplus < best) {
        best = surplus;
        std::vector<char> source = w.flow.sourceSide();
        set->assign(n_, 0);
        for (int v = 0; v < n_; ++v) (*set)[v] = !source[v];
      }
      w.flow.restore(w.saved);
    }
    return best;
  }

  // min(want, smallest surplus over the family), at least 0. A minimum cut that holds a compute
  // node has surplus value - need_; once that much is split off it is tight, and surpluses never
  // grow again during splitting, so it rules out later pairs without another max-flow.
  Cap familySlack(const std::vector<int>& sources, const std::vector<int>& sinks, Cap want) {
    std::vector<char> set;
    bool fromCut = false;
    compactLists();
    const Cap slack = smallestSurplus(workers_[0], sources, sinks, want, 0, &set, &fromCut);
    countFlows(workers_[0]);
    if (fromCut) tight_.push_back(std::move(set));
    return std::max<Cap>(0, slack);
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

  // The first pass's share of u's arc into w per out-arc of w (other than back to u), rounded up to
  // whole multiples of k: they let a group of k identical trees share one logical arc unsplit.
  Cap fairShare(int u, int w, const std::vector<int>& outs) const {
    const Cap in = cap_[idx(u, w)];
    const Cap others = static_cast<Cap>(outs.size()) - (cap_[idx(w, u)] > 0 ? 1 : 0);
    const Cap share = others > 0 ? (in + others - 1) / others : in;
    return share < k_ ? std::min(k_, in) : (share + k_ - 1) / k_ * k_;
  }

  // One planned split of the batch: `amount` moves from (u,w),(w,t) to (u,t).
  struct Move {
    int u, t;
    Cap amount;
  };

  // The splits that isolate w, planned without max-flows over the whole network: first each in-arc
  // spread over the out-arcs of the other parts of the network in fair shares (spreadOrder, as the
  // pair-by-pair passes below do), then the rest moved between different parts as far as a small
  // transport flow (in-arcs to out-arcs of other parts) can, then whatever is left (pairs within a
  // part, loops). Pairs within a part come last because they are what tight sets forbid: a box
  // whose in-capacity is all the cut bound allows loses capacity to every split inside it (u and t
  // in the box, w outside). Empty when w's in- and out-capacity differ.
  std::vector<Move> isolationPlan(int w, const std::vector<int>& part,
                                  const std::vector<std::vector<char>>& avoid) {
    std::vector<int> ins, outs;
    std::vector<Cap> in(n_, 0), out(n_, 0);
    Wide inTotal = 0, outTotal = 0;
    for (int v = 0; v < n_; ++v) {
      if ((in[v] = cap_[idx(v, w)]) > 0) ins.push_back(v), inTotal += in[v];
      if ((out[v] = cap_[idx(w, v)]) > 0) outs.push_back(v), outTotal += out[v];
    }
    std::vector<Move> plan;
    if (inTotal != outTotal || ins.empty()) return plan;
    auto inside = [&](int u, int t) {  // both ends in a set the plan must not lower
      for (const std::vector<char>& X : avoid)
        if (X[u] && X[t]) return true;
      return false;
    };
    auto move = [&](int u, int t, Cap amount) {
      if (amount <= 0) return;
      plan.push_back({u, t, amount});
      in[u] -= amount;
      out[t] -= amount;
    };
    for (int u : ins) {
      const Cap share = fairShare(u, w, outs);
      for (int t : spreadOrder(u, outs, part))
        if (t != u && !inside(u, t)) move(u, t, std::min({in[u], out[t], share}));
    }
    MaxFlow transport;  // node i: ins[i]; ins.size() + j: outs[j]; then source and sink
    const int a = static_cast<int>(ins.size()), b = static_cast<int>(outs.size());
    transport.reset(a + b + 2);
    std::vector<std::pair<int, std::pair<int, int>>> pairArcs;
    for (int i = 0; i < a; ++i) transport.addArc(a + b, i, in[ins[i]]);
    for (int j = 0; j < b; ++j) transport.addArc(a + j, a + b + 1, out[outs[j]]);
    for (int i = 0; i < a; ++i)
      for (int j = 0; j < b; ++j)
        if (ins[i] != outs[j] && !inside(ins[i], outs[j]) && in[ins[i]] > 0 && out[outs[j]] > 0)
          pairArcs.push_back({transport.addArc(i, a + j, kInfiniteCap), {ins[i], outs[j]}});
    transport.run(a + b, a + b + 1);
    // The transport flow is maximum, so no pair it offered has room left at both ends: what
    // remains is pairs inside avoided sets, and loops.
    for (const auto& [arc, ut] : pairArcs) move(ut.first, ut.second, transport.flowOn(arc));
    for (int u : ins)
      for (int t : outs)
        if (t != u) move(u, t, std::min(in[u], out[t]));
    for (int u : ins) move(u, u, std::min(in[u], out[u]));  // loops: only u can take it back
    for (int v = 0; v < n_; ++v)
      if (in[v] != 0 || out[v] != 0) return {};  // cannot happen when the totals agree
    return plan;
  }

  // Applies the capacity side of `plan` (+1) or takes it back (-1); routes are left alone.
  void shiftCapacities(int w, const std::vector<Move>& plan, int sign) {
    for (const Move& m : plan) {
      cap_[idx(m.u, w)] -= sign * m.amount;
      cap_[idx(w, m.t)] -= sign * m.amount;
      if (m.u == m.t) continue;
      if (sign > 0 && cap_[idx(m.u, m.t)] == 0) outs_[m.u].push_back(m.t);
      cap_[idx(m.u, m.t)] += sign * m.amount;
    }
    if (sign > 0) return;
    // flowTo dropped the emptied arcs from the lists and the plan added some: list exactly the
    // arcs with capacity again, so no arc is missing or listed twice.
    relist(w);
    for (const Move& m : plan) relist(m.u);
  }

  void relist(int u) {
    outs_[u].clear();
    for (int v = 0; v < n_; ++v)
      if (cap_[idx(u, v)] > 0) outs_[u].push_back(v);
  }

  // Isolates w with its whole isolationPlan at once when a few max-flows prove the plan keeps
  // Edmonds' condition; false (nothing changed) when they do not. Why so few flows suffice: a split
  // (u,w),(w,t) lowers ρ(X) only for X ∋ w with u,t ∉ X and for X ⊇ {u,t} with w ∉ X; once w is
  // isolated the first kind is the same set without w (w has no arcs left), which lost nothing. So
  // every set that lost capacity holds both ends of some planned pair, and one max-flow into each
  // node of the smaller end side (every u, or every t) checks them all: 2·|in|·|out| flows become
  // min(|in|, |out|) (plus augmentations where such a node is a switch, conditionHoldsAt).
  // Edmonds' condition for every set X ∋ y that holds a compute node: ρ(X) >= k·|Vc \ X|
  // (smallestSurplus, which tells the sets of switches only, below N·k at a switch y, from those
  // the condition asks about). On failure, *lowered is a violated set.
  bool conditionHoldsAt(FlowWorker& w, int y, std::vector<char>* lowered) const {
    bool fromCut = false;
    return smallestSurplus(w, {}, {y}, 0, -1, lowered, &fromCut) >= 0;
  }

  // The sets a plan (applied to the capacities) lowers below Edmonds' condition, checked by one
  // max-flow into each end on the smaller side of the planned pairs; empty when it holds.
  // Normally the first set found; with everySink, every sink is checked and each set found is
  // returned, so that one refused plan teaches the next as many sets as its check meets (on a fat
  // tree's last leaf switch, the violated sets are the pairs of its boxes: one per plan otherwise).
  // The sinks' flows are independent (the graph is only read), so two run at a time, one on a
  // second thread; the sets are reported in sink order, as one thread would find them (without
  // everySink, a pair's second flow may run in vain: counted in the max-flows all the same).
  std::vector<std::vector<char>> refusals(const std::vector<int>& sinks, bool everySink) {
    compactLists();
    std::vector<std::vector<char>> found;
    for (size_t i = 0; i < sinks.size(); i += 2) {
      std::vector<char> lowered[2];
      bool holds[2] = {true, true};
      if (i + 1 < sinks.size()) {
        second_.runBoth(
            [&] { holds[1] = conditionHoldsAt(workers_[1], sinks[i + 1], &lowered[1]); },
            [&] { holds[0] = conditionHoldsAt(workers_[0], sinks[i], &lowered[0]); });
      } else {
        holds[0] = conditionHoldsAt(workers_[0], sinks[i], &lowered[0]);
      }
      bool stop = false;
      for (int h = 0; h < 2 && !stop; ++h) {
        if (holds[h]) continue;
        found.push_back(std::move(lowered[h]));
        stop = !everySink;
      }
      if (stop) break;
    }
    countFlows(workers_[0]);
    countFlows(workers_[1]);
    return found;
  }

  bool isolateAtOnce(int w, const std::vector<int>& part) {
    // A plan that fails names the set it lowered too far (the sink side of the failing flow); the
    // next plan keeps its pairs out of it (after kPlanAttempts, every set its check finds). Each
    // try costs at most min(|in|, |out|) max-flows.
    std::vector<std::vector<char>> avoid;
    for (const std::vector<char>& X : tight_)
      if (!X[w]) avoid.push_back(X);
    for (int attempt = 0; attempt < kPlanAttempts + kLearningAttempts; ++attempt) {
      const std::vector<Move> plan = isolationPlan(w, part, avoid);
      if (plan.empty()) return false;
      std::vector<char> isU(n_, 0), isT(n_, 0);
      for (const Move& m : plan) isU[m.u] = isT[m.t] = 1;
      std::vector<int> us, ts;
      for (int v = 0; v < n_; ++v) {
        if (isU[v]) us.push_back(v);
        if (isT[v]) ts.push_back(v);
      }
      const std::vector<int>& sinks = us.size() <= ts.size() ? us : ts;
      shiftCapacities(w, plan, +1);
      std::vector<std::vector<char>> violated =
          refusals(sinks, /*everySink=*/attempt >= kPlanAttempts);
      shiftCapacities(w, plan, -1);
      if (violated.empty()) {
        for (const Move& m : plan) split(m.u, w, m.t, m.amount);
        dropArcsAt(w);
        ++stats().switchesBatched;
        return true;
      }
      // Two sinks of one violated set, or a later plan, may name a set again: keep one copy
      // (isolationPlan's inside() walks the whole list for every pair; a copy changes no plan).
      for (std::vector<char>& X : violated)
        if (std::find(avoid.begin(), avoid.end(), X) == avoid.end()) avoid.push_back(std::move(X));
    }
    return false;
  }

  void isolate(int w) {
    const std::vector<int> part = partsWithout(w);
    if (batched_ && isolateAtOnce(w, part)) return;
    ++stats().switchesPairwise;
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
        const Cap share = fairShare(u, w, outs);
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
  bool batched_;
  std::vector<Cap> cap_;                      // dense n*n working capacities
  std::vector<std::vector<PathPiece>> pieces_;  // dense n*n routes of each working arc
  std::vector<std::vector<int>> outs_;  // out-neighbours of each node (some may have emptied)
  std::vector<std::vector<int>> paths_;
  std::map<std::vector<int>, int> pathIds_;
  std::vector<std::vector<char>> tight_;  // sets with zero surplus (each holds a compute node)
  FlowWorker workers_[2];  // refusals checks two sinks at once
  SecondCore second_;
};

}  // namespace

SwitchFreeGraph removeSwitches(const Network& net, const std::vector<Cap>& caps, Cap k,
                               bool batched) {
  StepTimer timer(stats().secondsSplit, stats().cpuSecondsSplit, &stats().maxflowsSplit);
  return SwitchRemoval(net, caps, k, batched).run();
}

}  // namespace forestcc::graph
