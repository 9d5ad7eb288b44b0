// Conversion between Python plan dicts (what forestcc.plan.load returns and save writes) and the
// C++ forms: the JSON tree the one validator reads (cpp/src/plan/) and the in-memory plan::Plan.
// Validation is never done here: dictToPlan runs the C++ loader's validator on the converted tree.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "forestcc/plan.hpp"
#include "forestcc/plan_file.hpp"
#include "plan/json.hpp"

namespace forestcc::python {

// A Python value made of dict (str keys), list, str, int, float, bool and None as a JSON tree.
// Anything else (a tuple, a set, a non-str key, nesting deeper than json::kMaxDepth) is refused
// with plan::PlanError "<source>: <path>: <what>", the path as in "ranks[1].workers[0].ops[2].src".
json::Value pyToJson(const pybind11::handle& value, const std::string& source);
// A JSON tree as Python values (objects keep their member order).
pybind11::object jsonToPy(const json::Value& value);
// jsonToPy that frees the tree as it converts it (`value` is left empty); textBytes: the size of
// the text it came from, which says whether freed pages are worth handing back.
pybind11::object jsonToPyFreeing(json::Value& value, size_t textBytes);

// jsonToPyFreeing piece by piece, for a tree that arrives in parts (a plan's rank entries as the
// loader's streaming parse hands them over): one table of shared ints and interned names for all.
class JsonToPy {
 public:
  explicit JsonToPy(size_t textBytes);
  ~JsonToPy();
  pybind11::object take(json::Value& value);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// After a parse tree of a `textBytes` long plan was converted and freed: hands the freed heap
// pages back to the system (glibc keeps them otherwise). The tree of a 1,024-rank forest plan is
// gigabytes of small allocations, which Python's allocator cannot reuse, so without this they
// would stay in the process for as long as it lives. A no-op for small texts and without glibc.
void releaseFreedMemory(size_t textBytes);

pybind11::dict planToDict(const plan::Plan& plan);
// The plan of a dict, validated by the plan loader (plan::PlanError, a ValueError in Python,
// listing every problem; `source` names the dict in messages).
plan::Plan dictToPlan(const pybind11::handle& plan, const std::string& source = "<plan>");

}  // namespace forestcc::python
