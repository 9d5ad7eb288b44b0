// Built-in plan generators: parametric algorithms (ring, direct, halving/doubling, Bruck,
// pairwise, binomial tree; hierarchical and 2DH for several nodes) written as format-v1 plans
// for any rank count >= 1. Each algorithm
// lives in its own file under generators/; this registry names them, says what each covers and
// dispatches. Costs and constructions are documented in schedules/README.md ("Built-in
// generators").
#pragma once

#include <string>
#include <vector>

#include "forestcc/plan.hpp"

namespace forestcc::collectives {

struct GenerateRequest {
  plan::Collective collective;
  int nranks;
  int root = -1;  // rooted collectives: the root (-1: rank 0); others: must stay -1
  bool inPlace = false;
  // The node of every rank (nranks entries), for algorithms that follow the node layout
  // (hierarchical, 2dh); empty: one node. Any non-negative labels: generate() renumbers them by
  // first appearance in rank order, so equal layouts give equal plans.
  std::vector<int> nodeOf;
};

// Every built-in algorithm name, in registry order.
std::vector<std::string> algorithmNames();
// Whether `algo` names a built-in algorithm.
bool isAlgorithm(const std::string& algo);
// The collectives an algorithm implements (empty for an unknown name).
std::vector<plan::Collective> algorithmCollectives(const std::string& algo);
// A one-line description of an algorithm ("" for an unknown name).
std::string algorithmSummary(const std::string& algo);
// The largest message (bytes: the larger of input and output) the algorithm's plans serve, -1
// when unbounded (or unknown). Tuning rules are clamped to it.
int64_t algorithmMaxBytes(const std::string& algo, plan::Collective c, int nranks);
// Whether the algorithm's plans depend on GenerateRequest::nodeOf.
bool algorithmUsesNodes(const std::string& algo);
// Whether `algo` can generate `c` for `nranks` ranks; when not, *whyNot (if given) says why.
bool supports(const std::string& algo, plan::Collective c, int nranks, std::string* whyNot = nullptr);
// The plan of `algo` for the request. Throws forestcc::Error(InvalidUsage) naming the algorithm
// and what it supports when the request cannot be served.
plan::Plan generate(const std::string& algo, const GenerateRequest& req);

}  // namespace forestcc::collectives
