// forestcc._graph: the graph algorithms behind schedule generation, for the Python control plane.
// Inputs are plain lists (node count, compute mask, arcs with integer capacities); outputs are plain
// tuples, lists and dicts, so the Python side owns every data structure users see.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <tuple>

#include "graph/group_flow.hpp"
#include "graph/optimum.hpp"
#include "graph/tree_packing.hpp"
#include "graph/tree_shallowing.hpp"

namespace py = pybind11;
using namespace forestcc::graph;

namespace {

// Work bound of the shallowing pass (pair checks, about 10 ns each): a third of a second, small
// next to packing wherever the generic path is used.
constexpr long long kShallowingChecks = 30'000'000;

Network toNetwork(int n, const std::vector<bool>& compute, const std::vector<int>& src,
                  const std::vector<int>& dst, const std::vector<Cap>& cap) {
  std::vector<char> mask(compute.begin(), compute.end());
  return makeNetwork(n, mask, src, dst, cap);
}

std::vector<int> sideNodes(const std::vector<char>& side) {
  std::vector<int> nodes;
  for (size_t v = 0; v < side.size(); ++v)
    if (side[v]) nodes.push_back(static_cast<int>(v));
  return nodes;
}

py::dict statsDict() {
  const Stats& s = stats();
  py::dict d;
  d["maxflows"] = s.maxflows;
  d["switches_batched"] = s.switchesBatched;
  d["switches_pairwise"] = s.switchesPairwise;
  d["arcs_by_batch"] = s.arcsByBatch;
  d["batches_refused"] = s.batchesRefused;
  d["seconds_bound"] = s.secondsBound;
  d["seconds_switch_removal"] = s.secondsSplit;
  d["seconds_packing"] = s.secondsPack;
  d["maxflows_switch_removal"] = s.maxflowsSplit;
  d["maxflows_packing"] = s.maxflowsPack;
  d["cpu_seconds_bound"] = s.cpuSecondsBound;
  d["cpu_seconds_shallowing"] = s.cpuSecondsShallow;
  d["cpu_seconds_routing"] = s.cpuSecondsPaths;
  d["cpu_seconds_switch_removal"] = s.cpuSecondsSplit;
  d["cpu_seconds_packing"] = s.cpuSecondsPack;
  d["shallowing_changes"] = s.shallowingChanges;
  d["seconds_shallowing"] = s.secondsShallow;
  d["seconds_routing"] = s.secondsPaths;
  return d;
}

py::tuple maxRatioCutPy(int n, const std::vector<bool>& compute, const std::vector<int>& src,
                        const std::vector<int>& dst, const std::vector<Cap>& cap) {
  stats() = Stats{};
  CutBound bound;
  {
    py::gil_scoped_release release;
    bound = maxRatioCut(toNetwork(n, compute, src, dst, cap));
  }
  return py::make_tuple(bound.ratio.num, bound.ratio.den, sideNodes(bound.side));
}

py::dict generateForestPy(int n, const std::vector<bool>& compute, const std::vector<int>& src,
                          const std::vector<int>& dst, const std::vector<Cap>& cap, Cap k,
                          bool batchSwitches, int packByNode) {
  stats() = Stats{};
  Network net;
  CutBound bound;
  Cap natural = 0;
  ScaledCapacities scaled;
  SwitchFreeGraph logical;
  std::vector<PhysicalTree> trees;
  {
    py::gil_scoped_release release;
    net = toNetwork(n, compute, src, dst, cap);
    bound = maxRatioCut(net);
    natural = naturalTreeCount(net, bound.ratio);
    if (k <= 0) k = natural;
    scaled = capacitiesForTrees(net, bound, k);
    logical = removeSwitches(net, scaled.caps, k, batchSwitches);
    trees = routeTrees(logical, shallowTrees(logical, packTrees(logical, k, packByNode), kShallowingChecks));
  }
  py::list treeList;
  for (const PhysicalTree& t : trees)
    treeList.append(py::make_tuple(t.root, t.multiplicity, t.arcs, t.paths));
  py::dict out;
  out["ratio"] = py::make_tuple(bound.ratio.num, bound.ratio.den);
  out["cut"] = sideNodes(bound.side);
  out["k"] = k;
  out["natural_k"] = natural;
  out["u"] = py::make_tuple(scaled.u.num, scaled.u.den);
  out["trees"] = treeList;
  out["paths"] = logical.paths;
  out["stats"] = statsDict();
  return out;
}

bool conditionPy(int n, const std::vector<bool>& compute, const std::vector<int>& src,
                 const std::vector<int>& dst, const std::vector<Cap>& cap, Cap k) {
  Network net = toNetwork(n, compute, src, dst, cap);
  // net.arcs are merged and sorted, so capacities travel inside the network itself.
  std::vector<Cap> caps;
  for (const Arc& a : net.arcs) caps.push_back(a.cap);
  return rootedConditionHolds(net, caps, k, net.computeNodes, nullptr);
}

Cap maxFlowPy(int n, const std::vector<int>& src, const std::vector<int>& dst,
              const std::vector<Cap>& cap, int source, int sink) {
  if (source < 0 || source >= n || sink < 0 || sink >= n || source == sink)
    throw std::invalid_argument("max_flow: bad source or sink");
  MaxFlow flow;
  flow.reset(n);
  for (size_t i = 0; i < src.size(); ++i) flow.addArc(src[i], dst[i], cap[i]);
  return flow.run(source, sink);
}

// GroupFlow on a small network (for tests): arcs merged into an n*n matrix, groups as member lists;
// extraRank >= 0 adds extraSupply entering at that rank alone (the one-arc check's group). With
// side, and the flow below the limit, the source side of the minimum cut nearest the source.
Cap groupFlowPy(int n, const std::vector<int>& src, const std::vector<int>& dst,
                const std::vector<Cap>& cap, const std::vector<std::vector<int>>& groups,
                const std::vector<Cap>& supply, int sink, Cap limit, int extraRank,
                Cap extraSupply, std::vector<char>* side,
                const std::vector<std::tuple<int, int, Cap>>& lowered = {}) {
  if (n <= 0 || sink < 0 || sink >= n || groups.size() != supply.size())
    throw std::invalid_argument("group_flow: bad sink or groups");
  if (src.size() != dst.size() || src.size() != cap.size())
    throw std::invalid_argument("group_flow: src, dst and cap differ in length");
  if (extraRank >= n || extraRank == sink)
    throw std::invalid_argument("group_flow: extra_rank out of range or the sink");
  std::vector<Cap> matrix(static_cast<size_t>(n) * n, 0);  // by head, as GroupFlow reads it
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] < 0 || src[i] >= n || dst[i] < 0 || dst[i] >= n)
      throw std::invalid_argument("group_flow: arc end out of range");
    if (src[i] != dst[i] && cap[i] > 0) matrix[static_cast<size_t>(dst[i]) * n + src[i]] += cap[i];
  }
  std::vector<std::vector<int>> neighbours(n);
  for (int u = 0; u < n; ++u)
    for (int v = 0; v < n; ++v)
      if (matrix[static_cast<size_t>(u) * n + v] > 0 || matrix[static_cast<size_t>(v) * n + u] > 0)
        neighbours[v].push_back(u);
  const size_t words = groups.size() / 64 + 1;
  std::vector<std::vector<Word>> memberOf(n, std::vector<Word>(words, 0));
  std::vector<Word> active(words, 0);
  for (size_t j = 0; j < groups.size(); ++j) {
    bool holdsSink = false;
    for (int v : groups[j]) {
      if (v < 0 || v >= n) throw std::invalid_argument("group_flow: member out of range");
      memberOf[v][j / 64] |= Word(1) << (j % 64);
      holdsSink |= v == sink;
    }
    if (!holdsSink && supply[j] > 0) active[j / 64] |= Word(1) << (j % 64);
  }
  std::vector<std::vector<Word>> ranks(groups.size(), std::vector<Word>((n + 63) / 64, 0));
  std::vector<const std::vector<Word>*> members;
  for (size_t j = 0; j < groups.size(); ++j) {
    for (int v : groups[j]) ranks[j][v / 64] |= Word(1) << (v % 64);
    members.push_back(&ranks[j]);
  }
  GroupFlow flow;
  flow.setGraph(n, matrix, neighbours);
  // Capacities lowered after the graph was set, as packing lowers them (a pair emptied both ways
  // is then dropped).
  for (const auto& [u, v, amount] : lowered) {
    if (u < 0 || u >= n || v < 0 || v >= n || u == v || amount < 0 ||
        amount > matrix[static_cast<size_t>(v) * n + u])
      throw std::invalid_argument("group_flow: lowered arc out of range or below zero");
    flow.changeCapacity(u, v, -amount);
  }
  if (!lowered.empty()) flow.dropEmptyArcs();
  Cap value = flow.run(sink, active, supply, memberOf, members, limit, extraRank, extraSupply, side);
  if (flow.run(sink, active, supply, memberOf, members, limit, extraRank, extraSupply) !=
      value)  // a second run starts clean
    throw std::logic_error("group_flow: a second run gave another value");
  return value;
}

}  // namespace

PYBIND11_MODULE(_graph, m) {
  m.doc() = "forestcc graph core: exact max-flow, ForestColl cut bound, switch removal, tree packing";
  m.def("max_ratio_cut", &maxRatioCutPy, py::arg("n"), py::arg("compute"), py::arg("src"),
        py::arg("dst"), py::arg("cap"),
        "Exact max over cuts S of |S∩Vc|/B+(S): returns (num, den, nodes of S).");
  m.def("generate_forest", &generateForestPy, py::arg("n"), py::arg("compute"), py::arg("src"),
        py::arg("dst"), py::arg("cap"), py::arg("k") = 0, py::arg("batch_switches") = true,
        py::arg("pack_by_node") = -1,
        "ForestColl all_gather forest: bound, switch removal, k out-trees per root, routes. "
        "k = 0 picks the smallest k that reaches the optimum exactly. batch_switches=False "
        "isolates every switch pair by pair (the reference for the batched plans); pack_by_node: 1 "
        "grows trees node by node, 0 arc by arc, -1 node by node from 128 ranks on.");
  m.def("rooted_condition_holds", &conditionPy, py::arg("n"), py::arg("compute"), py::arg("src"),
        py::arg("dst"), py::arg("cap"), py::arg("k"),
        "Edmonds' condition: every compute node can receive N*k from a source feeding k to each.");
  m.def("sink_representatives", [](int n, const std::vector<bool>& compute,
                                   const std::vector<int>& src, const std::vector<int>& dst,
                                   const std::vector<Cap>& cap) {
    return sinkRepresentatives(toNetwork(n, compute, src, dst, cap));
  });
  m.def("max_flow", &maxFlowPy, py::arg("n"), py::arg("src"), py::arg("dst"), py::arg("cap"),
        py::arg("source"), py::arg("sink"), "Plain s-t max-flow value (for tests).");
  m.def(
      "group_flow",
      [](int n, const std::vector<int>& src, const std::vector<int>& dst,
         const std::vector<Cap>& cap, const std::vector<std::vector<int>>& groups,
         const std::vector<Cap>& supply, int sink, Cap limit, int extraRank, Cap extraSupply,
         const std::vector<std::tuple<int, int, Cap>>& lowered) {
        return groupFlowPy(n, src, dst, cap, groups, supply, sink, limit, extraRank, extraSupply,
                           nullptr, lowered);
      },
      py::arg("n"), py::arg("src"), py::arg("dst"), py::arg("cap"), py::arg("groups"),
      py::arg("supply"), py::arg("sink"), py::arg("limit"), py::arg("extra_rank") = -1,
      py::arg("extra_supply") = 0, py::arg("lowered") = std::vector<std::tuple<int, int, Cap>>{},
      "Max-flow into sink (stopped at limit) from groups that may enter at any of their members, "
      "each supplying its amount, plus extra_supply entering at extra_rank alone; groups holding "
      "the sink are left out; `lowered` (src, dst, amount) lowers arcs after the graph is set, as "
      "packing does (for tests).");
  m.def(
      "group_flow_cut",
      [](int n, const std::vector<int>& src, const std::vector<int>& dst,
         const std::vector<Cap>& cap, const std::vector<std::vector<int>>& groups,
         const std::vector<Cap>& supply, int sink, int extraRank, Cap extraSupply) {
        std::vector<char> side;
        const Cap value = groupFlowPy(n, src, dst, cap, groups, supply, sink, kInfiniteCap,
                                      extraRank, extraSupply, &side);
        return py::make_tuple(value, std::vector<bool>(side.begin(), side.end()));
      },
      py::arg("n"), py::arg("src"), py::arg("dst"), py::arg("cap"), py::arg("groups"),
      py::arg("supply"), py::arg("sink"), py::arg("extra_rank"), py::arg("extra_supply"),
      "group_flow, unlimited, with the ranks on the source side of the minimum cut nearest the "
      "source (extra_rank counted there, as the packing's one-arc check wants) (for tests).");
  m.def("last_stats", &statsDict, "Counters and timings of the last generate_forest call.");
}
