#include "graph/tree_packing.hpp"

#include "graph/group_flow.hpp"
#include "graph/second_core.hpp"

#include <deque>
#include <limits>
#include <queue>
#include <stdexcept>
#include <string>

namespace forestcc::graph {

namespace {

// Levels grown by all groups in turns before each group completes alone (see TreePacking::run):
// 1, the arcs out of the roots. On mi250x4, 2 and 3 give slightly shallower trees and no better
// simulated plans, at 1.7 and 2.1 times the packing time.
constexpr int kSharedLevels = 1;

// From this many ranks on, trees grow node by node (TreePacking::runByNode: one max-flow attaches a
// rank to every tree that can take it) instead of arc by arc. Below it the arc-by-arc growth stays:
// its trees are the ones the simulated figures in docs/forest-generation.md were measured on.
constexpr int kByNodeFrom = 128;

// From this many ranks on, node-by-node growth runs its two checks at once on two threads (below,
// one after the other): at 256 ranks a check is too short for the hand-over (packing the 16x16
// torus took 0.34 s on one thread, 0.49 s on two); at 1,024 two threads took the fat tree's
// packing from 10.1 to 7.1 s.
constexpr int kTwoCoresFrom = 512;

struct NodeSet {
  std::vector<Word> words;
  explicit NodeSet(int n = 0) : words((n + 63) / 64, 0) {}
  bool has(int v) const { return (words[v >> 6] >> (v & 63)) & 1; }
  void add(int v) { words[v >> 6] |= Word(1) << (v & 63); }
  void remove(int v) { words[v >> 6] &= ~(Word(1) << (v & 63)); }
  bool meets(const NodeSet& other) const {
    for (size_t i = 0; i < words.size(); ++i)
      if (words[i] & other.words[i]) return true;
    return false;
  }
};

struct Group {
  LogicalTree tree;
  std::vector<int> order;  // nodes in the order they joined (breadth-first growth)
  std::vector<int> depth;  // per node: arcs from the root (meaningful for members)
  NodeSet members;
  size_t scanParent = 0;   // growth resumes here: earlier candidates are known to be unusable
  int scanStep = 0;
  bool complete = false;
};

class TreePacking {
 public:
  TreePacking(const SwitchFreeGraph& g, Cap k, int sharedLevels)
      : n_(g.count), residualIn_(g.cap.size()), sharedLevels_(sharedLevels),
        second_(g.count >= kTwoCoresFrom) {
    // Residuals only shrink, so the arcs worth scanning are those with capacity at the start.
    std::vector<std::vector<int>> neighbours(n_);
    for (size_t a = 0; a < g.cap.size(); ++a) {
      const int u = static_cast<int>(a / n_), v = static_cast<int>(a % n_);
      res(u, v) = g.cap[a];
      if (g.cap[a] <= 0) continue;
      arcs_.push_back(a);
      neighbours[v].push_back(u);
      if (g.cap[static_cast<size_t>(v) * n_ + u] <= 0) neighbours[u].push_back(v);
    }
    groupFlow_.setGraph(n_, residualIn_, neighbours);
    aheadFlow_.setGraph(n_, residualIn_, neighbours);
    memberOf_.assign(n_, {});
    for (int r = 0; r < n_; ++r) {
      Group grp;
      grp.tree = {r, k, {}};
      grp.order = {r};
      grp.depth.assign(n_, 0);
      grp.members = NodeSet(n_);
      grp.members.add(r);
      groups_.push_back(std::move(grp));
      noteGroup(r);
      schedule(r);
    }
  }

  // Two phases. First every group takes, in turns, the arcs out of its nodes less than
  // sharedLevels_ deep, the shallowest parent first: the capacity near the roots goes to the groups
  // that can use it near their roots. Then each group grows to completion in turn (breadth-first,
  // as Lovász's construction usually runs). Every arc the max-flow admits keeps the packing
  // completable, so the order is free; it only shapes the trees. Growing each group to completion
  // from the start let the first roots' trees take the arcs near every root, so the last roots'
  // trees wound through what was left (mi250x4: up to 44 levels at k = 1); sharing every level
  // makes every max-flow carry every group's partial tree, several times slower.
  // Node by node: for each rank y in turn, every incomplete group that y can join (a member x with
  // an arc x -> y whose capacity covers all its copies, not blocked by a known tight set) takes
  // the arc from its shallowest such member, and ONE max-flow into y proves the whole batch. Why
  // one suffices: every new arc enters y, so only sets X ∋ y lose capacity, and for those the
  // groups that took y no longer need to enter X; the flow into y checks all of them (groups that
  // hold y need nothing either; the others enter through a hub as in admissible()). A batch that
  // fails is bisected: its longest prefix that holds is taken, its next group is decided by the
  // exact one-arc check (which may split the group), the rest wait for the next round. Rounds
  // repeat until every group spans all ranks; a round without progress hands the rest to the
  // arc-by-arc growth. The order of growth is free (every admitted step keeps the packing
  // completable), so the result is as exact as run()'s; growing all groups a level at a time also
  // keeps the trees shallow.
  std::vector<LogicalTree> runByNode() {
    turns_ = {};
    deferred_.clear();
    taken_.assign(n_, 0);
    ins_.assign(n_, {});
    for (size_t a : arcs_) ins_[a % n_].push_back(static_cast<int>(a / n_));
    for (bool progress = true; progress;) {
      progress = false;
      groupFlow_.dropEmptyArcs();  // once a round: what the last round used up
      aheadFlow_.dropEmptyArcs();
      // Ranks in turn, two batches at a time: y's batch is joined on trust, the next rank's batch
      // (y2) is made on that state, and both are checked at once, y's on groupFlow_ and y2's on
      // aheadFlow_ (which alone has y2's arcs taken). Mostly both hold; when y's does not, it is
      // taken back and y2's check is void. The trees are those of one check after the other.
      for (int y = 0; y < n_;) {
        const std::vector<Join> batch = batchFor(y);
        if (batch.empty()) {
          ++y;
          continue;
        }
        for (const Join& b : batch) join(b.group, b.parent, y, supplyOf(b.group));
        int y2 = y + 1;
        std::vector<Join> ahead;
        for (; y2 < n_ && ahead.empty(); ++y2) ahead = batchFor(y2);
        --y2;  // the rank of `ahead` (when it is not empty)
        bool holds = false, aheadHolds = false;
        loadGroupsOutside(y, -1, active_);
        if (ahead.empty()) {
          holds = flowHolds(groupFlow_, y, active_);
          ++stats().maxflows;
        } else {
          for (const Join& b : ahead) aheadFlow_.changeCapacity(b.parent, y2, -supplyOf(b.group));
          loadGroupsOutside(y2, -1, aheadActive_);
          for (const Join& b : ahead) aheadActive_[b.group / 64] &= ~(Word(1) << (b.group % 64));
          second_.runBoth([&] { aheadHolds = flowHolds(aheadFlow_, y2, aheadActive_); },
                          [&] { holds = flowHolds(groupFlow_, y, active_); });
          stats().maxflows += 2;
          for (const Join& b : ahead) aheadFlow_.changeCapacity(b.parent, y2, supplyOf(b.group));
        }
        if (!holds) {
          for (size_t b = batch.size(); b-- > 0;) unjoin(batch[b].group, batch[b].parent, y);
          progress |= settle(y, batch);
          ++y;
          continue;
        }
        progress = true;
        stats().arcsByBatch += static_cast<long long>(batch.size());
        if (ahead.empty()) break;  // y was the last rank with a batch this round
        if (aheadHolds) {
          for (const Join& b : ahead) join(b.group, b.parent, y2, supplyOf(b.group));
          stats().arcsByBatch += static_cast<long long>(ahead.size());
        } else {
          settle(y2, ahead);
        }
        y = y2 + 1;
      }
    }
    // What node-by-node growth could not finish (arcs whose capacity no longer covers a whole
    // group), arc by arc.
    sharedLevels_ = std::numeric_limits<int>::max();
    for (size_t i = 0; i < groups_.size(); ++i) {
      Group& g = groups_[i];
      g.scanParent = 0;
      g.scanStep = 0;
      if (static_cast<int>(g.order.size()) == n_) g.complete = true;
      if (!g.complete) deferred_.push_back(static_cast<int>(i));
    }
    return run();
  }

  std::vector<LogicalTree> run() {
    while (!turns_.empty()) {
      int i = turns_.top().group;
      turns_.pop();
      takeTurn(i);
    }
    sharedLevels_ = std::numeric_limits<int>::max();
    while (!deferred_.empty()) {
      int i = deferred_.front();
      deferred_.pop_front();
      schedule(i);
      while (!turns_.empty()) {  // i, and the groups split off it
        int j = turns_.top().group;
        turns_.pop();
        takeTurn(j);
      }
    }
    std::vector<LogicalTree> out;
    for (Group& g : groups_) out.push_back(std::move(g.tree));
    return out;
  }

 private:
  // The residual capacity of u -> v. Stored by head, so that a rank's in-arcs lie together: the
  // node-by-node growth and GroupFlow's search read the arcs into one rank at a time.
  Cap& res(int u, int v) { return residualIn_[static_cast<size_t>(v) * n_ + u]; }

  // Takes `amount` of u -> v's residual capacity (a negative amount gives it back), here and in
  // the flows' copies.
  void take(int u, int v, Cap amount) {
    res(u, v) -= amount;
    groupFlow_.changeCapacity(u, v, -amount);
    aheadFlow_.changeCapacity(u, v, -amount);
  }

  // A remembered tight set X blocks (x, y) for group i when the arc enters X and the group already
  // has a node inside X (so the arc would lower ρ(X) without lowering X's demand).
  bool blocked(const Group& g, int x, int y) const {
    for (const NodeSet& X : tight_)
      if (X.has(y) && !X.has(x) && X.meets(g.members)) return true;
    return false;
  }

  // How many copies of group i may take (x, y): min(want, min surplus over X with y ∈ X, x ∉ X).
  // The surplus of X counts, for every other incomplete group j, m_j when X misses j's nodes; as a
  // cut, j's term is an arc s -> hub j -> (j's nodes) of capacity m_j, and group i enters at x
  // alone. Groups holding y pass every such cut and are left out (GroupFlow). Records the cut
  // when it binds: the sets beyond the source side of the minimum cut nearest the source.
  Cap admissible(int i, int x, int y, Cap want) {
    const Cap base = loadGroupsOutside(y, i, active_);
    ++stats().maxflows;
    std::vector<char> side;
    const Cap value = groupFlow_.run(y, active_, supply_, memberOf_, groupRanks_, base + want, x,
                                     want, &side);
    if (value >= base + want) return want;
    NodeSet X(n_);
    for (int v = 0; v < n_; ++v)
      if (!side[v]) X.add(v);
    tight_.push_back(std::move(X));  // tight once the admitted copies take the arc
    return std::max<Cap>(0, value - base);
  }

  // Loads `active`, supply_ and groupRanks_ for GroupFlow with every group that holds neither y
  // (complete groups hold it) nor is `skip`; returns their demand.
  Cap loadGroupsOutside(int y, int skip, std::vector<Word>& active) {
    const std::vector<Word>& holdY = memberOf_[y];
    active.assign(holdY.size(), 0);
    supply_.resize(groups_.size());
    groupRanks_.resize(groups_.size());
    Wide demand = 0;
    for (size_t j = 0; j < groups_.size(); ++j) {
      supply_[j] = groups_[j].tree.multiplicity;
      groupRanks_[j] = &groups_[j].members.words;
      if (static_cast<int>(j) != skip && !((holdY[j / 64] >> (j % 64)) & 1)) {
        active[j / 64] |= Word(1) << (j % 64);
        demand += supply_[j];
      }
    }
    return checkedCap(demand, "tree demand");
  }

  Cap supplyOf(int group) const { return groups_[group].tree.multiplicity; }

  // Whether the groups in `active` can all enter y at once on `flow`'s capacities (Lovász's
  // condition for every set that holds y, see runByNode). Reads the packing's state only: two run
  // at once.
  bool flowHolds(GroupFlow& flow, int y, const std::vector<Word>& active) const {
    Wide need = 0;
    for (size_t w = 0; w < active.size(); ++w)
      for (Word bits = active[w]; bits != 0; bits &= bits - 1)
        need += supply_[w * 64 + __builtin_ctzll(bits)];
    const Cap limit = checkedCap(need, "tree demand");
    return flow.run(y, active, supply_, memberOf_, groupRanks_, limit) >= limit;
  }

  struct Join {
    int group;
    int parent;
  };

  // Group i takes (x, y) with `copies` (its whole multiplicity, the caller split it before).
  void join(int i, int x, int y, Cap copies) {
    Group& g = groups_[i];
    take(x, y, copies);
    g.tree.arcs.push_back({x, y});
    g.order.push_back(y);
    g.depth[y] = g.depth[x] + 1;
    g.members.add(y);
    memberOf_[y][i / 64] |= Word(1) << (i % 64);
    if (static_cast<int>(g.order.size()) == n_) g.complete = true;
  }

  // Takes back group i's last join, of y with its whole multiplicity.
  void unjoin(int i, int x, int y) {
    Group& g = groups_[i];
    take(x, y, -g.tree.multiplicity);
    g.tree.arcs.pop_back();
    g.order.pop_back();
    g.members.remove(y);
    memberOf_[y][i / 64] &= ~(Word(1) << (i % 64));
    g.complete = false;
  }

  // Splits `copies` of group i's multiplicity off into a new group i keeps; the rest (a copy of
  // the partial tree) becomes a new group, whose index is returned.
  int splitOff(int i, Cap copies) {
    Group rest = groups_[i];
    rest.tree.multiplicity -= copies;
    groups_[i].tree.multiplicity = copies;
    groups_.push_back(std::move(rest));
    const int j = static_cast<int>(groups_.size()) - 1;
    noteGroup(j);
    return j;
  }

  // Records the members of a new group (the last one) in memberOf_, widening every rank's bitset
  // when the groups outgrow it.
  void noteGroup(int j) {
    const size_t words = groups_.size() / 64 + 1;
    if (memberOf_[0].size() < words) {
      const size_t wider = std::max(words, 2 * memberOf_[0].size());
      for (std::vector<Word>& bits : memberOf_) bits.resize(wider, 0);
    }
    for (int v : groups_[j].order) memberOf_[v][j / 64] |= Word(1) << (j % 64);
  }

  // Whether the first `count` joins of `batch` (each a whole group into y) keep Lovász's
  // condition for every set X ∋ y (see runByNode): one max-flow into y from the groups that must
  // still enter it.
  bool batchHolds(int y, const std::vector<Join>& batch, size_t count) {
    loadGroupsOutside(y, -1, active_);
    for (size_t b = 0; b < count; ++b) {
      const int j = batch[b].group;
      active_[j / 64] &= ~(Word(1) << (j % 64));
      take(batch[b].parent, y, supplyOf(j));
    }
    ++stats().maxflows;
    const bool holds = flowHolds(groupFlow_, y, active_);
    for (size_t b = 0; b < count; ++b) take(batch[b].parent, y, -supplyOf(batch[b].group));
    return holds;
  }

  // The joins of y's batch: every incomplete group without y that has a member x with an arc
  // x -> y whose capacity covers all its copies (after the groups before it in the batch), not
  // blocked by a known tight set, takes it from its shallowest such member.
  std::vector<Join> batchFor(int y) {
    std::vector<Join> batch;
    for (size_t j = 0; j < groups_.size(); ++j) {
      const Group& g = groups_[j];
      if (g.complete || g.members.has(y)) continue;
      int best = -1;
      for (int x : ins_[y]) {
        if (!g.members.has(x) || res(x, y) - taken_[x] < g.tree.multiplicity) continue;
        if (best >= 0 && g.depth[x] >= g.depth[best]) continue;
        if (blocked(g, x, y)) continue;
        best = x;
      }
      if (best < 0) continue;
      batch.push_back({static_cast<int>(j), best});
      taken_[best] += g.tree.multiplicity;
    }
    for (const Join& b : batch) taken_[b.parent] = 0;
    return batch;
  }

  // For a batch whose whole check failed: joins its longest prefix that holds (bisection), then decides its next group by the exact one-arc check (which may split the
  // group); the rest wait for the next round. Returns whether anything joined.
  bool settle(int y, const std::vector<Join>& batch) {
    ++stats().batchesRefused;
    size_t lo = 0, hi = batch.size() - 1;  // prefix lo holds, prefix hi + 1 does not
    while (lo < hi) {
      size_t mid = (lo + hi + 1) / 2;
      if (batchHolds(y, batch, mid)) lo = mid;
      else hi = mid - 1;
    }
    const size_t good = lo;
    for (size_t b = 0; b < good; ++b) join(batch[b].group, batch[b].parent, y, supplyOf(batch[b].group));
    bool progress = good > 0;
    stats().arcsByBatch += static_cast<long long>(good);
    if (good < batch.size()) {
      const Join& next = batch[good];
      const Cap want = std::min(res(next.parent, y), supplyOf(next.group));
      const Cap copies = admissible(next.group, next.parent, y, want);
      if (copies > 0) {
        if (copies < supplyOf(next.group)) splitOff(next.group, copies);
        join(next.group, next.parent, y, copies);
        progress = true;
      }
    }
    return progress;
  }

  // The depth of the node group i scans next (the key of its turn).
  void schedule(int i) {
    const Group& g = groups_[i];
    const int depth = g.depth[g.order[g.scanParent]];
    if (depth < sharedLevels_)
      turns_.push({depth, sequence_++, i});
    else
      deferred_.push_back(i);
  }

  // Adds at most one arc to group i, out of its scanned node while that node stays no deeper than
  // this turn's key; a group that moves on to a deeper node yields its turn to shallower groups.
  void takeTurn(int i) {
    Group& g = groups_[i];
    if (static_cast<int>(g.order.size()) == n_) {
      g.complete = true;
      return;
    }
    const int key = g.depth[g.order[g.scanParent]];
    for (; g.scanParent < g.order.size(); ++g.scanParent, g.scanStep = 0) {
      int x = g.order[g.scanParent];
      if (g.depth[x] > key) {
        schedule(i);
        return;
      }
      for (; g.scanStep < n_; ++g.scanStep) {
        int y = (x + 1 + g.scanStep) % n_;
        if (g.members.has(y) || res(x, y) == 0 || blocked(g, x, y)) continue;
        Cap want = std::min(res(x, y), g.tree.multiplicity);
        Cap copies = admissible(i, x, y, want);
        if (copies == 0) continue;
        if (copies < groups_[i].tree.multiplicity)
          schedule(splitOff(i, copies));  // the copies that do not take (x, y) continue later
        join(i, x, y, copies);
        ++groups_[i].scanStep;  // groups_ may have reallocated
        if (!groups_[i].complete) schedule(i);
        return;
      }
    }
    throw std::runtime_error("tree packing is stuck for root " + std::to_string(g.tree.root) +
                             " (Edmonds' condition does not hold?)");
  }

  struct Turn {
    int depth;
    long long sequence;  // first come, first served among equal depths
    int group;
    bool operator<(const Turn& other) const {  // std::priority_queue pops the largest
      return depth != other.depth ? depth > other.depth : sequence > other.sequence;
    }
  };

  int n_;
  std::vector<Cap> residualIn_;  // n*n, by head (res)
  std::vector<size_t> arcs_;  // u*n+v of every arc with capacity at the start
  std::vector<Group> groups_;
  std::priority_queue<Turn> turns_;
  std::deque<int> deferred_;  // groups past the shared levels, grown one at a time
  int sharedLevels_;
  long long sequence_ = 0;
  std::vector<NodeSet> tight_;
  std::vector<std::vector<Word>> memberOf_;  // per rank: the groups whose partial tree holds it
  GroupFlow groupFlow_;  // every feasibility check's max-flow but the next batch's
  GroupFlow aheadFlow_;  // the next rank's batch check (runByNode), on the second core
  SecondCore second_;
  std::vector<Word> active_, aheadActive_;  // the groups that must still enter y (and y2)
  std::vector<Cap> taken_;  // batchFor's: per parent x, what the batch already takes of x -> y
  std::vector<std::vector<int>> ins_;  // per rank: the ranks with an arc into it at the start
  std::vector<Cap> supply_;
  std::vector<const std::vector<Word>*> groupRanks_;  // per group: its members' bitset
};

}  // namespace

std::vector<LogicalTree> packTrees(const SwitchFreeGraph& graph, Cap k, int byNode) {
  StepTimer timer(stats().secondsPack, stats().cpuSecondsPack, &stats().maxflowsPack);
  TreePacking packing(graph, k, kSharedLevels);
  std::vector<LogicalTree> trees = (byNode < 0 ? graph.count >= kByNodeFrom : byNode != 0)
                                          ? packing.runByNode()
                                          : packing.run();
  return trees;
}

std::vector<PhysicalTree> routeTrees(SwitchFreeGraph& graph, const std::vector<LogicalTree>& trees) {
  StepTimer timer(stats().secondsPaths, stats().cpuSecondsPaths);
  std::vector<PhysicalTree> out;
  for (const LogicalTree& t : trees) {
    // Take t.multiplicity units of routing from each arc, then cut [0, multiplicity) at every
    // point where some arc changes path: each piece is one physical tree.
    std::vector<std::vector<PathPiece>> routes(t.arcs.size());
    for (size_t a = 0; a < t.arcs.size(); ++a) {
      auto& list = graph.pieces[static_cast<size_t>(t.arcs[a].first) * graph.count + t.arcs[a].second];
      Cap need = t.multiplicity;
      while (need > 0) {
        if (list.empty()) throw std::logic_error("tree uses more of an arc than it has");
        PathPiece& last = list.back();
        Cap part = std::min(need, last.amount);
        routes[a].push_back({last.path, part});
        need -= part;
        if ((last.amount -= part) == 0) list.pop_back();
      }
    }
    std::vector<size_t> at(t.arcs.size(), 0);
    Cap done = 0;
    while (done < t.multiplicity) {
      Cap step = t.multiplicity - done;
      for (size_t a = 0; a < routes.size(); ++a) step = std::min(step, routes[a][at[a]].amount);
      PhysicalTree p;
      p.root = graph.nodes[t.root];
      p.multiplicity = step;
      for (size_t a = 0; a < routes.size(); ++a) {
        p.arcs.push_back({graph.nodes[t.arcs[a].first], graph.nodes[t.arcs[a].second]});
        p.paths.push_back(routes[a][at[a]].path);
        if ((routes[a][at[a]].amount -= step) == 0) ++at[a];
      }
      out.push_back(std::move(p));
      done += step;
    }
  }
  return out;
}

}  // namespace forestcc::graph
