// _C.reduce_kernels: the CPU executor's element-wise reductions at a chosen instruction-set level
// (executor/reduce_kernels.hpp), so tests can hold every level to numpy's results and to each
// other's, bit for bit, in one process.
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "executor/reduce_kernels.hpp"
#include "python/array_view.hpp"
#include "python/module.hpp"

namespace py = pybind11;

namespace forestcc::python {

namespace {

executor::CpuIsa isaArg(const std::string& text) {
  executor::CpuIsa isa;
  if (!executor::parse(text, isa)) throw py::value_error("level: unknown level '" + text + "' (v2, avx2 or avx512)");
  return isa;
}

}  // namespace

void bindReduceKernels(py::module_& m) {
  py::module_ r = m.def_submodule("reduce_kernels", "The CPU reductions at each instruction-set level (tests)");
  r.def("supported", [] {
    std::vector<std::string> out;
    for (int i = 0; i <= static_cast<int>(executor::cpuIsaSupported()); ++i)
      out.push_back(executor::name(static_cast<executor::CpuIsa>(i)));
    return out;
  }, "The levels this CPU runs, lowest first.");
  r.def("in_use", [] { return std::string(executor::name(executor::cpuIsaInUse())); },
        "The level collectives use (FORESTCC_CPU_ISA, or the best supported).");
  r.def("reduce", [](const std::string& level, py::handle out, const std::vector<py::handle>& srcs, const std::string& op) {
    const executor::CpuIsa isa = isaArg(level);
    ReduceOp reduceOp;
    if (!parse(op, reduceOp)) throw py::value_error("op: unknown reduction '" + op + "'");
    if (srcs.empty()) throw py::value_error("srcs: needs at least one source");
    const ArrayView dst = viewArray(out, "out", true);
    std::vector<ArrayView> views;
    std::vector<const void*> pointers;
    for (const py::handle& s : srcs) {
      views.push_back(viewArray(s, "srcs", false));
      if (views.back().dtype != dst.dtype || views.back().count != dst.count)
        throw py::value_error("srcs: every source needs out's dtype and size");
      pointers.push_back(views.back().data);
    }
    executor::reduceElementsWith(isa, dst.data, pointers.data(), static_cast<int>(pointers.size()), dst.count,
                                 dst.dtype, reduceOp);
  }, py::arg("level"), py::arg("out"), py::arg("srcs"), py::arg("op"),
     "out[i] = op(srcs[0][i], ..., srcs[-1][i]) at `level` (out may be one of srcs).");
  r.def("divide", [](const std::string& level, py::handle data, int divisor) {
    const executor::CpuIsa isa = isaArg(level);
    if (divisor < 1) throw py::value_error("divisor: must be at least 1 (a rank count), got " + std::to_string(divisor));
    const ArrayView v = viewArray(data, "data", true);
    executor::divideElementsWith(isa, v.data, v.count, v.dtype, divisor);
  }, py::arg("level"), py::arg("data"), py::arg("divisor"), "data[i] /= divisor at `level` (an average's last step).");
}

}  // namespace forestcc::python
