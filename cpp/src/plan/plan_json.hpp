// The plan loader's steps on a JSON tree, for callers that hold one instead of text (the Python
// binding converts plan dicts into json::Value and validates them here, so Python and C++ share
// one validator).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "forestcc/plan_file.hpp"
#include "plan/json.hpp"

namespace forestcc::plan {

// The JSON tree of plan text; PlanError "<source>: not valid JSON: <line>:<col>: <reason>".
json::Value parsePlanJson(std::string_view text, const std::string& source);
// Every structural problem of a plan document (types, ranges, names, buffer sizes, chunk refs in
// range, channel ownership and pairing, the limits), as full messages; empty when valid. The
// checks are format v1's, the messages those of schedules/README.md ("Errors").
std::vector<std::string> validationErrors(const json::Value& plan, const std::string& source,
                                          const Limits& limits = {});
// validationErrors for a plan whose rank entries come one at a time, so that a loader never holds
// the whole document's tree (json::ArrayStream): the same checks in the same order, the same
// messages. header() takes the plan's members but the ranks (its "ranks" an empty list) and says
// whether they pass; rank() takes the entries in order; clean() says whether no error was found
// yet (the header passed); finish() gives every error.
class RankByRankValidator {
 public:
  RankByRankValidator(const std::string& source, const Limits& limits = {});
  ~RankByRankValidator();
  bool header(const json::Value& plan);
  void rank(const json::Value& entry);
  bool clean() const;
  std::vector<std::string> finish();

 private:
  struct State;
  std::string source_;
  Limits limits_;
  std::unique_ptr<State> state_;
};
// parsePlanJson, with the items of the top-level "ranks" list handed to `stream` one by one.
json::Value parsePlanJson(std::string_view text, const std::string& source, const json::ArrayStream& stream);
// The in-memory plan of a document; validates it first (PlanError listing every problem), then
// refuses what the fixed-size Op record cannot hold (more reduce sources than kMaxReduceSources).
Plan planFromJson(const json::Value& plan, const std::string& source, const Limits& limits = {});

}  // namespace forestcc::plan
