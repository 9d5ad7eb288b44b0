#include "collectives/generators/node_layout.hpp"

#include <algorithm>

namespace forestcc::collectives::gen {

NodeLayout::NodeLayout(const GenerateRequest& req) : node_(req.nranks, 0), local_(req.nranks, 0) {
  if (!req.nodeOf.empty()) node_ = req.nodeOf;
  for (int r = 0; r < req.nranks; ++r) {
    if (node_[r] >= int(members_.size())) members_.resize(node_[r] + 1);
    local_[r] = int(members_[node_[r]].size());
    members_[node_[r]].push_back(r);
  }
  for (const auto& m : members_) largest_ = std::max(largest_, int(m.size()));
}

std::vector<int> NodeLayout::localPeers(int rank) const {
  std::vector<int> out;
  for (int q : members_[node(rank)])
    if (q != rank) out.push_back(q);
  return out;
}

}  // namespace forestcc::collectives::gen
