#include "collectives/generators.hpp"

#include <algorithm>
#include <map>

#include "collectives/generators/common.hpp"
#include "forestcc/error.hpp"

namespace forestcc::collectives {

namespace {

// Channel ids are 16-bit in the op record, and direct plans give a rank N-1 channels.
constexpr int kMaxRanks = 1 << 16;

const std::vector<const gen::Algorithm*>& registry() {
  static const std::vector<const gen::Algorithm*> algorithms{
      &gen::ringAlgorithm(),     &gen::directAlgorithm(), &gen::directSmallAlgorithm(),
      &gen::halvingDoublingAlgorithm(), &gen::bruckAlgorithm(), &gen::pairwiseAlgorithm(),
      &gen::treeAlgorithm(),     &gen::eagerAlgorithm(), &gen::hierarchicalAlgorithm(),
      &gen::twoDimensionalAlgorithm()};
  return algorithms;
}

const gen::Algorithm* find(const std::string& algo) {
  for (const gen::Algorithm* a : registry())
    if (algo == a->name) return a;
  return nullptr;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string collectiveList(const gen::Algorithm& a) {
  std::vector<std::string> names;
  for (plan::Collective c : a.collectives) names.push_back(plan::name(c));
  return join(names);
}

// nodeOf renumbered by first appearance (empty for one node); refuses a malformed layout.
std::vector<int> normalizedNodes(const std::string& algo, const GenerateRequest& req) {
  if (req.nodeOf.empty()) return {};
  auto refuse = [&](const std::string& why) {
    throw Error(ErrorCode::InvalidUsage, "forestcc: cannot generate " + algo + " " + plan::name(req.collective) +
                                             ": node layout: " + why);
  };
  if (int(req.nodeOf.size()) != req.nranks)
    refuse("gives the node of " + std::to_string(req.nodeOf.size()) + " ranks, not of all " +
           std::to_string(req.nranks));
  std::map<int, int> number;
  std::vector<int> out(req.nranks);
  for (int r = 0; r < req.nranks; ++r) {
    if (req.nodeOf[r] < 0) refuse("rank " + std::to_string(r) + " is on node " + std::to_string(req.nodeOf[r]) + " (nodes are >= 0)");
    auto it = number.emplace(req.nodeOf[r], int(number.size())).first;
    out[r] = it->second;
  }
  if (number.size() == 1) out.clear();
  return out;
}

}  // namespace

std::vector<std::string> algorithmNames() {
  std::vector<std::string> names;
  for (const gen::Algorithm* a : registry()) names.push_back(a->name);
  return names;
}

bool isAlgorithm(const std::string& algo) { return find(algo) != nullptr; }

std::vector<plan::Collective> algorithmCollectives(const std::string& algo) {
  const gen::Algorithm* a = find(algo);
  return a ? a->collectives : std::vector<plan::Collective>{};
}

std::string algorithmSummary(const std::string& algo) {
  const gen::Algorithm* a = find(algo);
  return a ? a->summary : "";
}

bool algorithmUsesNodes(const std::string& algo) {
  const gen::Algorithm* a = find(algo);
  return a && a->usesNodes;
}

int64_t algorithmMaxBytes(const std::string& algo, plan::Collective c, int nranks) {
  const gen::Algorithm* a = find(algo);
  return a && a->maxBytes ? a->maxBytes(c, nranks) : -1;
}

bool supports(const std::string& algo, plan::Collective c, int nranks, std::string* whyNot) {
  auto no = [&](const std::string& why) {
    if (whyNot) *whyNot = why;
    return false;
  };
  const gen::Algorithm* a = find(algo);
  if (!a) return no("unknown algorithm '" + algo + "' (built-in algorithms: " + join(algorithmNames()) + ")");
  if (nranks < 1 || nranks > kMaxRanks)
    return no("nranks must be in 1.." + std::to_string(kMaxRanks) + ", got " + std::to_string(nranks));
  if (std::find(a->collectives.begin(), a->collectives.end(), c) == a->collectives.end())
    return no(std::string("algorithm '") + a->name + "' does not implement " + plan::name(c) +
              " (it implements " + collectiveList(*a) + ")");
  return true;
}

plan::Plan generate(const std::string& algo, const GenerateRequest& req) {
  std::string why;
  if (!supports(algo, req.collective, req.nranks, &why))
    throw Error(ErrorCode::InvalidUsage, "forestcc: cannot generate a plan: " + why);
  GenerateRequest resolved = req;
  const gen::Algorithm* a = find(algo);
  resolved.nodeOf = a->usesNodes ? normalizedNodes(algo, req) : std::vector<int>{};
  if (plan::rooted(req.collective)) {
    if (resolved.root == -1) resolved.root = 0;
    if (resolved.root < 0 || resolved.root >= req.nranks)
      throw Error(ErrorCode::InvalidUsage, "forestcc: cannot generate " + algo + " " + plan::name(req.collective) +
                                               ": root " + std::to_string(req.root) + " is not a rank of " +
                                               std::to_string(req.nranks) + " (0.." + std::to_string(req.nranks - 1) + ")");
  } else if (req.root != -1) {
    throw Error(ErrorCode::InvalidUsage, "forestcc: cannot generate " + algo + " " + plan::name(req.collective) +
                                             ": " + plan::name(req.collective) + " takes no root (got root " +
                                             std::to_string(req.root) + ")");
  }
  return a->generate(resolved);
}

}  // namespace forestcc::collectives
