// The node layout a hierarchical plan is generated for: which node every rank is on, the ranks
// of each node in rank order, and each rank's local index there. Nodes may hold different rank
// counts and ranks need not be numbered node by node. The "rail" partner of a rank on another
// node is the rank there with the same local index, wrapped around that node's size when the
// nodes are uneven: hierarchical plans send across nodes only between rail partners.
#pragma once

#include <vector>

#include "collectives/generators.hpp"

namespace forestcc::collectives::gen {

class NodeLayout {
 public:
  // From a request whose nodeOf is normalized (generators.cpp): empty means one node.
  explicit NodeLayout(const GenerateRequest& req);

  int nodes() const { return int(members_.size()); }
  int node(int rank) const { return node_[rank]; }
  int local(int rank) const { return local_[rank]; }
  // The ranks of node a in rank order.
  const std::vector<int>& members(int a) const { return members_[a]; }
  int size(int a) const { return int(members_[a].size()); }
  // The most ranks any node has.
  int largest() const { return largest_; }
  // The rank on node a that stands in for local index j: j mod (ranks of a).
  int at(int a, int j) const { return members_[a][j % size(a)]; }
  // The rank on node a through which traffic for `rank` passes: its rail partner there (the
  // rank itself on its own node).
  int railOf(int a, int rank) const { return node(rank) == a ? rank : at(a, local(rank)); }
  // The ranks on the same node as `rank`, without it.
  std::vector<int> localPeers(int rank) const;

 private:
  std::vector<int> node_, local_;
  std::vector<std::vector<int>> members_;
  int largest_ = 0;
};

}  // namespace forestcc::collectives::gen
