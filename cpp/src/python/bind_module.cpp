#include "python/module.hpp"

#include "forestcc/config.hpp"
#include "forestcc/cuda.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "forestcc native core (private: use the forestcc package)";
  forestcc::python::bindErrors(m);
  forestcc::python::bindBootstrap(m);
  forestcc::python::bindMemory(m);
  forestcc::python::bindChannel(m);
  forestcc::python::bindCommunicator(m);
  forestcc::python::bindPlan(m);
  forestcc::python::bindCollectives(m);
  forestcc::python::bindSim(m);
  forestcc::python::bindReduceKernels(m);
  m.def("config_table", [] {
    py::list out;
    for (const auto& e : forestcc::configTable())
      out.append(py::make_tuple(e.name, e.type, e.defaultValue, e.doc));
    return out;
  }, "The configuration knobs: (name, type, default, doc) tuples.");
  m.def("config_string", [](const std::string& name) { return forestcc::configString(name.c_str()); },
        "A knob's value (the environment's, else its default); unknown names raise.");
  m.def("built_with_cuda", &forestcc::builtWithCuda);
  m.def("cuda_device_count", &forestcc::cudaDeviceCount);
  m.def("cuda_semaphore_self_test", &forestcc::cudaSemaphoreSelfTest, py::call_guard<py::gil_scoped_release>());
}
