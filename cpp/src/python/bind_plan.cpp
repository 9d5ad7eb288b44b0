#include "collectives/generators.hpp"
#include "forestcc/error.hpp"
#include "forestcc/plan.hpp"
#include "python/module.hpp"
#include "python/plan_dict.hpp"

namespace py = pybind11;

namespace forestcc::python {

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

  sub.def(
      "generate",
      [](const std::string& algo, const std::string& collective, int nranks, py::object root, bool inPlace) {
        plan::Collective c;
        if (!plan::parse(collective, c)) {
          std::string known;
          for (int i = 0; i < plan::kCollectiveCount; ++i)
            known += std::string(i ? ", " : "") + plan::name(static_cast<plan::Collective>(i));
          throw Error(ErrorCode::InvalidUsage, "forestcc: unknown collective '" + collective + "' (one of " + known + ")");
        }
        collectives::GenerateRequest req{c, nranks, root.is_none() ? -1 : root.cast<int>(), inPlace};
        plan::Plan p;
        {
          py::gil_scoped_release release;
          p = collectives::generate(algo, req);
        }
        return planToDict(p);
      },
      py::arg("algo"), py::arg("collective"), py::arg("nranks"), py::arg("root") = py::none(),
      py::arg("in_place") = false,
      "A built-in plan as a format-v1 dict (what forestcc.plan.load returns). root: rooted "
      "collectives only (None: rank 0). Raises ValueError for an unknown algorithm or collective, "
      "a collective the algorithm does not implement, nranks < 1 or a root out of range.");
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
}

}  // namespace forestcc::python
