#include "graph/network.hpp"

#include <map>
#include <numeric>
#include <stdexcept>

namespace forestcc::graph {

namespace {

// Nodes reachable from `start` along arcs (forward) or against them (backward).
std::vector<char> reachable(const Network& net, int start, bool forward) {
  std::vector<std::vector<int>> adj(net.n);
  for (const Arc& a : net.arcs) {
    if (forward) adj[a.src].push_back(a.dst);
    else adj[a.dst].push_back(a.src);
  }
  std::vector<char> seen(net.n, 0);
  std::vector<int> stack{start};
  seen[start] = 1;
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    for (int w : adj[v]) {
      if (!seen[w]) {
        seen[w] = 1;
        stack.push_back(w);
      }
    }
  }
  return seen;
}

}  // namespace

Network makeNetwork(int n, const std::vector<char>& compute, const std::vector<int>& src,
                    const std::vector<int>& dst, const std::vector<Cap>& cap) {
  if (n <= 0 || static_cast<int>(compute.size()) != n)
    throw std::invalid_argument("network: compute mask must have one entry per node");
  if (src.size() != dst.size() || src.size() != cap.size())
    throw std::invalid_argument("network: src, dst and cap must have the same length");
  Network net;
  net.n = n;
  net.compute = compute;
  for (int v = 0; v < n; ++v)
    if (compute[v]) net.computeNodes.push_back(v);
  if (net.computeCount() < 2)
    throw std::invalid_argument("network: a collective needs at least 2 compute nodes");
  std::map<std::pair<int, int>, Wide> merged;
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] < 0 || src[i] >= n || dst[i] < 0 || dst[i] >= n)
      throw std::invalid_argument("network: arc " + std::to_string(i) + " has a node out of range");
    if (cap[i] < 0)
      throw std::invalid_argument("network: arc " + std::to_string(i) + " has negative capacity");
    if (src[i] == dst[i] || cap[i] == 0) continue;  // a loop or an empty arc carries nothing
    merged[{src[i], dst[i]}] += cap[i];
  }
  for (const auto& [key, c] : merged)
    net.arcs.push_back({key.first, key.second, checkedCap(c, "merged arc capacity")});
  int first = net.computeNodes.front();
  auto fwd = reachable(net, first, true), bwd = reachable(net, first, false);
  for (int v : net.computeNodes) {
    if (!fwd[v] || !bwd[v])
      throw std::invalid_argument("network: compute node " + std::to_string(v) +
                                  (fwd[v] ? " cannot reach" : " cannot be reached from") +
                                  " compute node " + std::to_string(first));
  }
  return net;
}

Ratio reduced(Wide num, Wide den) {
  if (den <= 0) throw std::logic_error("ratio with non-positive denominator");
  Wide a = num < 0 ? -num : num, b = den;
  while (b != 0) {
    Wide t = a % b;
    a = b;
    b = t;
  }
  Wide g = a == 0 ? 1 : a;
  return {checkedCap(num / g, "ratio numerator"), checkedCap(den / g, "ratio denominator")};
}

bool ratioLess(const Ratio& a, const Ratio& b) {
  return Wide(a.num) * b.den < Wide(b.num) * a.den;
}

Cap checkedCap(Wide value, const char* what) {
  // Keep well below 2^63 so that flow values (sums of capacities) never overflow.
  const Wide limit = Wide(1) << 58;
  if (value > limit || value < -limit)
    throw std::overflow_error(std::string("graph: ") + what +
                              " exceeds 2^58; use coarser bandwidth units");
  return static_cast<Cap>(value);
}

Stats& stats() {
  static Stats s;
  return s;
}

}  // namespace forestcc::graph
