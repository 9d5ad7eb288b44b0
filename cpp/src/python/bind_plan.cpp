#include <pybind11/stl.h>

#include <atomic>
#include <string_view>

#include "collectives/generators.hpp"
#include "collectives/tuning_table.hpp"
#include "executor/packet_plan.hpp"
#include "forestcc/error.hpp"
#include "forestcc/plan.hpp"
#include "forestcc/plan_file.hpp"
#include "plan/plan_json.hpp"
#include "python/module.hpp"
#include "python/plan_dict.hpp"

namespace py = pybind11;

namespace forestcc::python {

namespace {

// The limits of format v1 by their Python names (forestcc.plan.ops.MAX_*), in one table for
// LIMITS and for reading a caller's limits.
struct LimitField {
  const char* name;
  int64_t plan::Limits::*field;
};
const LimitField kLimitFields[] = {
    {"MAX_RANKS", &plan::Limits::maxRanks},       {"MAX_CHUNKS", &plan::Limits::maxChunks},
    {"MAX_SLICES", &plan::Limits::maxSlices},     {"MAX_BYTES", &plan::Limits::maxBytes},
    {"MAX_WORKERS", &plan::Limits::maxWorkers},   {"MAX_CHANNELS", &plan::Limits::maxChannels},
    {"MAX_CHANNELS_PER_PEER", &plan::Limits::maxChannelsPerPeer},
    {"MAX_OPS", &plan::Limits::maxOps},           {"MAX_FILE_BYTES", &plan::Limits::maxFileBytes},
};

// Limits from a {name: value} dict; names left out keep their defaults.
plan::Limits limitsOf(const py::object& given) {
  plan::Limits limits;
  if (given.is_none()) return limits;
  py::dict d = given.cast<py::dict>();
  for (const LimitField& f : kLimitFields) {
    if (d.contains(f.name)) limits.*f.field = d[f.name].cast<int64_t>();
  }
  return limits;
}

// (value, []) on success, (None, [messages]) when the plan loader refuses: Python raises its own
// PlanError with the list, so no exception crosses the binding.
template <class F>
py::tuple outcome(F&& run) {
  try {
    return py::make_tuple(run(), py::list());
  } catch (const plan::PlanError& e) {
    return py::make_tuple(py::none(), py::cast(e.errors()));
  }
}

// The text of a str (its UTF-8, which Python caches) or bytes as a view of the object's own
// buffer: a plan's text is hundreds of MB at 1,024 ranks, and a copy would be held through the
// whole parse. The caller's reference keeps the object (immutable) alive while the view is read.
std::string_view textView(const py::handle& text) {
  if (PyBytes_Check(text.ptr())) {
    return {PyBytes_AS_STRING(text.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(text.ptr()))};
  }
  if (PyUnicode_Check(text.ptr())) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
    if (data == nullptr) {
      PyErr_Clear();
      throw py::type_error("plan text: a str that cannot be encoded as UTF-8 (lone surrogates)");
    }
    return {data, static_cast<size_t>(size)};
  }
  throw py::type_error(std::string("plan text must be str or bytes, not ") + Py_TYPE(text.ptr())->tp_name);
}

// The plan dict of plan text, parsed and validated. The rank entries are validated and converted
// one by one as the parse hands them over (json::ArrayStream), so the load holds the dict and
// one entry's tree, never the whole document's tree (several GB for a 1,024-rank forest plan, 1.8
// times the dict). A plan whose "ranks" is not the last member (or not a list) is loaded whole,
// as before: the rank-by-rank check needs the header first.
// Loads that went rank by rank, for tests: a load that fell back to the whole document gives the
// same dict and errors, so only this tells the two paths apart (tests/test_plan_loader.py).
std::atomic<uint64_t> rankByRankLoads{0};

py::object loadPlanText(std::string_view text, const std::string& source, const plan::Limits& limits) {
  plan::RankByRankValidator check(source, limits);
  JsonToPy convert(text.size());
  py::list ranks;
  json::Value doc;
  bool streamed = false;
  {
    py::gil_scoped_release release;
    json::ArrayStream stream{"ranks", [&](const json::Value& before) {
                               streamed = true;
                               check.header(before);
                             },
                             [&](json::Value& entry) {
                               check.rank(entry);
                               if (check.clean()) {
                                 py::gil_scoped_acquire acquire;
                                 ranks.append(convert.take(entry));
                               }
                               entry = json::Value();
                             }};
    doc = plan::parsePlanJson(text, source, stream);
  }
  if (!streamed || doc.asObject().back().first != "ranks") {  // checked whole, as validationErrors does
    ranks = py::list();
    {
      py::gil_scoped_release release;
      if (streamed) doc = plan::parsePlanJson(text, source);  // again, the entries kept this time
      std::vector<std::string> errors = plan::validationErrors(doc, source, limits);
      if (!errors.empty()) throw plan::PlanError(std::move(errors));
    }
    py::object plan = jsonToPyFreeing(doc, text.size());
    releaseFreedMemory(text.size());
    return plan;
  }
  ++rankByRankLoads;
  std::vector<std::string> errors = check.finish();
  if (!errors.empty()) throw plan::PlanError(std::move(errors));
  py::object plan = convert.take(doc);
  plan["ranks"] = ranks;
  releaseFreedMemory(text.size());
  return plan;
}

}  // namespace

void bindPlan(py::module_& m) {
  py::module_ sub = m.def_submodule("plan", "The C++ plan contract (names of format v1).");
  sub.attr("FORMAT_VERSION") = plan::kFormatVersion;
  sub.attr("MAX_REDUCE_SOURCES") = plan::kMaxReduceSources;
  py::list ops, collectives, buffers;
  for (int i = 0; i < plan::kOpCount; ++i) ops.append(plan::name(static_cast<plan::OpCode>(i)));
  for (int i = 0; i < plan::kCollectiveCount; ++i) collectives.append(plan::name(static_cast<plan::Collective>(i)));
  for (int i = 0; i < plan::kBufferCount; ++i) buffers.append(plan::name(static_cast<plan::Buffer>(i)));
  sub.attr("OPS") = py::tuple(ops);
  sub.attr("COLLECTIVES") = py::tuple(collectives);
  sub.attr("BUFFERS") = py::tuple(buffers);
  py::dict limits;
  const plan::Limits defaults;
  for (const LimitField& f : kLimitFields) limits[f.name] = defaults.*f.field;
  sub.attr("LIMITS") = limits;

  // The plan loader (cpp/include/forestcc/plan_file.hpp) for forestcc.plan.format. Each returns
  // (result, errors): errors empty on success, else every message (result None).
  sub.def(
      "read_file",
      [](const std::string& path, py::object limits) {
        const plan::Limits l = limitsOf(limits);
        return outcome([&] {
          std::string data;
          {
            py::gil_scoped_release release;
            data = plan::readPlanFile(path, l);
          }
          return py::bytes(data);
        });
      },
      py::arg("path"), py::arg("limits") = py::none(),
      "(bytes of a plan file, errors): 'cannot read' or 'larger than MAX_FILE_BYTES' naming it.");
  sub.def(
      "load_text",
      [](const py::object& textObject, const std::string& source, py::object limits) {
        const plan::Limits l = limitsOf(limits);
        const std::string_view text = textView(textObject);
        return outcome([&] { return loadPlanText(text, source, l); });
      },
      py::arg("text"), py::arg("source"), py::arg("limits") = py::none(),
      "(plan dict, errors) of plan JSON text (str or UTF-8 bytes), parsed and validated.");
  sub.def(
      "rank_by_rank_loads", [] { return rankByRankLoads.load(); },
      "How many load_text calls so far validated and converted the rank entries one by one as "
      "they were parsed (a plan whose 'ranks' is its last member), for tests.");
  sub.def(
      "parse_text",
      [](const py::object& textObject, const std::string& source) {
        const std::string_view text = textView(textObject);
        return outcome([&] {
          py::object value;
          {
            json::Value doc;
            {
              py::gil_scoped_release release;
              doc = plan::parsePlanJson(text, source);
            }
            value = jsonToPy(doc);
          }
          releaseFreedMemory(text.size());
          return value;
        });
      },
      py::arg("text"), py::arg("source"),
      "(JSON value, errors) of JSON text, parsed by the plan loader's parser, not validated.");
  sub.def(
      "validation_errors",
      [](const py::handle& plan, const std::string& source, py::object limits) {
        const plan::Limits l = limitsOf(limits);
        try {
          json::Value doc = pyToJson(plan, source);
          py::gil_scoped_release release;
          return plan::validationErrors(doc, source, l);
        } catch (const plan::PlanError& e) {
          return e.errors();
        }
      },
      py::arg("plan"), py::arg("source"), py::arg("limits") = py::none(),
      "Every structural problem of a plan dict, as messages naming the source, rank, worker and "
      "step; empty when valid.");
  sub.def(
      "to_json",
      [](const py::handle& plan) { return plan::toJson(dictToPlan(plan)); },
      py::arg("plan"),
      "The canonical text of a valid plan dict as the C++ writer gives it (plan::toJson).");

  sub.def(
      "runs_with_packets",
      [](const py::handle& plan) {
        const plan::Plan p = dictToPlan(plan);
        if (p.ranks.empty()) return false;
        std::vector<std::vector<plan::Op>> workers;
        for (const plan::WorkerProgram& w : p.ranks[0].workers) workers.push_back(w.ops);
        return executor::markPacketWaits(p, 0, std::vector<int>(p.nranks, 0), workers);
      },
      py::arg("plan"),
      "Whether a valid plan dict's calls can move their data as packets, all ranks on one node "
      "(schedules/README.md, \"Packets\"; executor/packet_plan.hpp): an eager plan whose every "
      "put_signal fills scratch chunks of its own that its peer touches only after the wait for it.");
  sub.def(
      "generate",
      [](const std::string& algo, const std::string& collective, int nranks, py::object root, bool inPlace,
         std::vector<int> nodes) {
        plan::Collective c;
        if (!plan::parse(collective, c)) {
          std::string known;
          for (int i = 0; i < plan::kCollectiveCount; ++i)
            known += std::string(i ? ", " : "") + plan::name(static_cast<plan::Collective>(i));
          throw Error(ErrorCode::InvalidUsage, "forestcc: unknown collective '" + collective + "' (one of " + known + ")");
        }
        collectives::GenerateRequest req{c, nranks, root.is_none() ? -1 : root.cast<int>(), inPlace, std::move(nodes)};
        plan::Plan p;
        {
          py::gil_scoped_release release;
          p = collectives::generate(algo, req);
        }
        return planToDict(p);
      },
      py::arg("algo"), py::arg("collective"), py::arg("nranks"), py::arg("root") = py::none(),
      py::arg("in_place") = false, py::arg("nodes") = std::vector<int>{},
      "A built-in plan as a format-v1 dict (what forestcc.plan.load returns). root: rooted "
      "collectives only (None: rank 0). nodes: the node of every rank (empty: one node), for the "
      "algorithms that follow the node layout (hierarchical, 2dh). Raises ValueError for an unknown "
      "algorithm or collective, a collective the algorithm does not implement, nranks < 1, a root "
      "out of range or a malformed node layout.");
  sub.def(
      "algorithms",
      [] {
        py::list out;
        for (const std::string& name : collectives::algorithmNames()) {
          py::list names;
          for (plan::Collective c : collectives::algorithmCollectives(name)) names.append(plan::name(c));
          out.append(py::make_tuple(name, names));
        }
        return out;
      },
      "The built-in algorithms: a list of (name, [collectives it implements]).");
  sub.def(
      "choose_algorithm",
      [](const std::string& collective, int nranks, int nodes, uint64_t bytes, int memory, int inPlace,
         py::object table) {
        collectives::CallShape call;
        if (!plan::parse(collective, call.collective))
          throw py::value_error("collective: unknown collective '" + collective + "'");
        call.nranks = nranks, call.nodes = nodes, call.bytes = bytes, call.memory = memory, call.inPlace = inPlace;
        std::vector<collectives::TuningRule> rules =
            table.is_none() ? collectives::loadTuningTable()
                            : collectives::parseTuningTable(table.cast<std::string>(), "<table>");
        collectives::clampToAlgorithms(rules, nranks);
        return collectives::selectAlgorithm(rules, call);
      },
      py::arg("collective"), py::arg("nranks"), py::arg("nodes"), py::arg("bytes"),
      py::arg("memory") = collectives::kAnyMemory, py::arg("in_place") = collectives::kAnyPlacement,
      py::arg("table") = py::none(),
      "The algorithm algo='auto' picks for a call of `bytes` (the larger buffer) on nranks ranks over "
      "`nodes` nodes, by the active tuning table or the JSON text `table`; '' when no rule matches "
      "(the call then runs 'direct'). memory: -1 unknown, 0 private, 1 shared; in_place: -1, 0, 1.");
  sub.def(
      "check_tuning_table",
      [](const std::string& text, const std::string& source) {
        return collectives::parseTuningTable(text, source).size();
      },
      py::arg("text"), py::arg("source"),
      "Checks a tuning table (JSON text) as libforestcc loads it; ValueError naming `source` and the "
      "rule. Returns the number of rules the engine keeps (all_to_all_v's are dropped).");
  sub.def("algorithm_uses_nodes", &collectives::algorithmUsesNodes, py::arg("algo"),
          "Whether the algorithm's plans follow the node layout (generate's nodes).");
  sub.def("algorithm_summary", &collectives::algorithmSummary, py::arg("algo"),
          "A one-line description of a built-in algorithm ('' for an unknown name).");
  sub.def(
      "algorithm_max_bytes",
      [](const std::string& algo, const std::string& collective, int nranks) -> py::object {
        plan::Collective c;
        if (!plan::parse(collective, c)) throw py::value_error("collective: unknown collective '" + collective + "'");
        const int64_t limit = collectives::algorithmMaxBytes(algo, c, nranks);
        return limit < 0 ? py::object(py::none()) : py::object(py::int_(limit));
      },
      py::arg("algo"), py::arg("collective"), py::arg("nranks"),
      "The largest message in bytes (the larger of input and output) that the algorithm's plans "
      "serve on nranks ranks, or None when unbounded (eager plans: their scratch bank).");
  bindVerifierClocks(sub);
  bindVerifierCoAccess(sub);
  bindVerifierMemory(sub);
  bindVerifierDigest(sub);
  bindTreeCompiler(sub);
}

}  // namespace forestcc::python
