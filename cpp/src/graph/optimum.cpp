#include "graph/optimum.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <queue>
#include <stdexcept>

namespace forestcc::graph {

namespace {

Wide gcdWide(Wide a, Wide b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b != 0) {
    Wide t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// B+(S) and |S ∩ Vc| of a side vector.
Ratio sideRatio(const Network& net, const std::vector<char>& side) {
  Wide out = 0, inside = 0;
  for (const Arc& a : net.arcs)
    if (side[a.src] && !side[a.dst]) out += a.cap;
  for (int v : net.computeNodes) inside += side[v] ? 1 : 0;
  if (out == 0) throw std::logic_error("cut with no capacity leaving it (network not connected)");
  return reduced(inside, out);
}

// maxflow(s -> sink) with s feeding every compute node `feed`, arcs scaled by capacities `caps`.
// Returns the flow (capped at `limit`) and leaves the network in `flow` for cut extraction.
Cap rootedFlow(const Network& net, const std::vector<Cap>& caps, Cap feed, int sink, Cap limit,
               MaxFlow& flow) {
  flow.reset(net.n + 1);
  const int s = net.n;
  for (size_t i = 0; i < net.arcs.size(); ++i)
    flow.addArc(net.arcs[i].src, net.arcs[i].dst, caps[i]);
  for (int c : net.computeNodes) flow.addArc(s, c, feed);
  ++stats().maxflows;
  return flow.run(s, sink, limit);
}

}  // namespace

bool rootedConditionHolds(const Network& net, const std::vector<Cap>& caps, Cap k,
                          const std::vector<int>& sinks, std::vector<char>* violating) {
  MaxFlow flow;
  const Cap need = checkedCap(Wide(net.computeCount()) * k, "N*k");
  for (int v : sinks) {
    if (rootedFlow(net, caps, k, v, need, flow) < need) {
      if (violating) {
        *violating = flow.sourceSide();
        violating->pop_back();  // drop s
      }
      return false;
    }
  }
  return true;
}

std::vector<int> sinkRepresentatives(const Network& net) {
  // Colours start from the node kind and are refined by the multisets of (capacity, colour) over
  // in- and out-arcs until the number of classes stops growing.
  std::vector<std::vector<std::pair<Cap, int>>> out(net.n), in(net.n);
  for (const Arc& a : net.arcs) {
    out[a.src].push_back({a.cap, a.dst});
    in[a.dst].push_back({a.cap, a.src});
  }
  std::vector<int> colour(net.n);
  for (int v = 0; v < net.n; ++v) colour[v] = net.compute[v] ? 1 : 0;
  int classes = 0;
  for (int round = 0; round < net.n; ++round) {
    std::map<std::vector<Cap>, int> ids;
    std::vector<int> next(net.n);
    for (int v = 0; v < net.n; ++v) {
      std::vector<Cap> key{colour[v]};
      for (auto* list : {&out[v], &in[v]}) {
        std::vector<std::pair<Cap, int>> sig;
        for (auto [c, w] : *list) sig.push_back({c, colour[w]});
        std::sort(sig.begin(), sig.end());
        key.push_back(-1);  // separator between out- and in-lists
        for (auto [c, col] : sig) {
          key.push_back(c);
          key.push_back(col);
        }
      }
      next[v] = ids.emplace(std::move(key), static_cast<int>(ids.size())).first->second;
    }
    colour.swap(next);
    if (static_cast<int>(ids.size()) == classes) break;
    classes = static_cast<int>(ids.size());
  }
  std::vector<int> reps;
  std::vector<char> taken(net.n, 0);
  for (int v : net.computeNodes) {
    if (!taken[colour[v]]) {
      taken[colour[v]] = 1;
      reps.push_back(v);
    }
  }
  return reps;
}

CutBound maxRatioCut(const Network& net) {
  StepTimer timer(stats().secondsBound, stats().cpuSecondsBound);
  const int n = net.n;
  const Cap count = net.computeCount();
  // Start from the best single-node cut S = V \ {v}: N−1 shards must enter v.
  std::vector<Wide> inCap(n, 0);
  for (const Arc& a : net.arcs) inCap[a.dst] += a.cap;
  CutBound best;
  best.ratio = {0, 1};
  for (int v : net.computeNodes) {
    Ratio r = reduced(count - 1, inCap[v]);
    if (best.side.empty() || ratioLess(best.ratio, r)) {
      best.ratio = r;
      best.side.assign(n, 1);
      best.side[v] = 0;
    }
  }
  const std::vector<int> reps = sinkRepresentatives(net);
  bool allSinks = reps.size() == net.computeNodes.size();
  std::vector<Cap> caps(net.arcs.size());
  MaxFlow flow;
  while (true) {
    // At λ = p/q: arcs get p·cap, compute nodes are fed q; a flow below N·q means a cut with
    // λ·B+(S) < |S ∩ Vc|, i.e. a ratio above λ.
    const Cap p = best.ratio.num, q = best.ratio.den;
    for (size_t i = 0; i < net.arcs.size(); ++i)
      caps[i] = checkedCap(Wide(p) * net.arcs[i].cap, "ratio * capacity");
    const Cap need = checkedCap(Wide(count) * q, "N * ratio denominator");
    bool improved = false;
    const std::vector<int>& sinks = allSinks ? net.computeNodes : reps;
    for (int v : sinks) {
      if (rootedFlow(net, caps, q, v, need, flow) >= need) continue;
      std::vector<char> side = flow.sourceSide();
      side.pop_back();
      Ratio r = sideRatio(net, side);
      if (ratioLess(best.ratio, r)) {
        best.ratio = r;
        best.side = std::move(side);
        improved = true;
        // Dinkelbach converges from any improving cut; restarting at once saves the other sinks.
        break;
      }
    }
    if (improved) continue;
    if (allSinks) break;
    allSinks = true;  // final check of every compute node at this λ
  }
  return best;
}

Cap naturalTreeCount(const Network& net, const Ratio& ratio) {
  Wide g = 0;
  for (const Arc& a : net.arcs) g = gcdWide(g, a.cap);
  // U·cap = k·num·cap/den is integral for all arcs iff den divides k·num·g, i.e. den/gcd(den, g) | k.
  return checkedCap(Wide(ratio.den) / gcdWide(ratio.den, g), "natural tree count");
}

ScaledCapacities capacitiesForTrees(const Network& net, const CutBound& optimum, Cap k) {
  if (k <= 0) throw std::invalid_argument("trees per root must be positive");
  ScaledCapacities out;
  out.u = reduced(Wide(k) * optimum.ratio.num, optimum.ratio.den);
  auto fill = [&] {
    out.caps.resize(net.arcs.size());
    for (size_t i = 0; i < net.arcs.size(); ++i)
      out.caps[i] = checkedCap(Wide(out.u.num) * net.arcs[i].cap / out.u.den, "scaled capacity");
  };
  fill();
  const std::vector<int> reps = sinkRepresentatives(net);
  std::vector<char> side;
  while (true) {
    // Rounding U·cap down may break a cut; raise U to the next value at which that cut holds,
    // then look again (every raise is forced, so the final U is the smallest that works).
    bool ok = rootedConditionHolds(net, out.caps, k, reps, &side) &&
              rootedConditionHolds(net, out.caps, k, net.computeNodes, &side);
    if (ok) break;
    Wide need = 0;
    for (int v : net.computeNodes) need += side[v] ? k : 0;
    std::vector<size_t> leaving;
    Wide have = 0;
    for (size_t i = 0; i < net.arcs.size(); ++i) {
      if (side[net.arcs[i].src] && !side[net.arcs[i].dst]) {
        leaving.push_back(i);
        have += out.caps[i];
      }
    }
    // Event queue over the next breakpoints (floor(U·c)+1)/c of the leaving arcs.
    auto later = [&](const std::pair<Ratio, size_t>& a, const std::pair<Ratio, size_t>& b) {
      return ratioLess(b.first, a.first);
    };
    std::priority_queue<std::pair<Ratio, size_t>, std::vector<std::pair<Ratio, size_t>>,
                        decltype(later)>
        events(later);
    for (size_t i : leaving)
      events.push({reduced(Wide(out.caps[i]) + 1, net.arcs[i].cap), i});
    while (have < need) {
      auto [at, i] = events.top();
      events.pop();
      out.u = at;
      Cap now = checkedCap(Wide(at.num) * net.arcs[i].cap / at.den, "scaled capacity");
      have += now - out.caps[i];
      out.caps[i] = now;
      events.push({reduced(Wide(now) + 1, net.arcs[i].cap), i});
    }
    fill();
  }
  return out;
}

}  // namespace forestcc::graph
