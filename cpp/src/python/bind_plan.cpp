#include "forestcc/plan.hpp"
#include "python/module.hpp"

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
}

}  // namespace forestcc::python
