#include "forestcc/bootstrap.hpp"
#include "forestcc/error.hpp"
#include "python/module.hpp"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace forestcc::python {

void bindBootstrap(py::module_& m) {
  py::class_<UniqueId>(m, "UniqueId", "128 bytes naming a job: rank 0's address and a random magic.")
      .def_static("create", &UniqueId::create, "A new id; rank 0 of this process will listen on it.")
      .def_static("from_bytes", [](py::bytes b) { return UniqueId::fromBytes(std::string(b)); })
      .def_static("from_address", &UniqueId::fromAddress, py::arg("host_port"), py::arg("magic") = 0)
      .def("__bytes__", [](const UniqueId& id) {
        return py::bytes(reinterpret_cast<const char*>(id.bytes.data()), UniqueId::kBytes);
      })
      .def_property_readonly("address", &UniqueId::address)
      .def_property_readonly("magic", &UniqueId::magic)
      .def("__repr__", [](const UniqueId& id) { return "<forestcc.UniqueId " + id.address() + ">"; });

  py::class_<LaunchInfo>(m, "LaunchInfo")
      .def_readonly("rank", &LaunchInfo::rank)
      .def_readonly("size", &LaunchInfo::size)
      .def_readonly("local_rank", &LaunchInfo::localRank)
      .def_readonly("source", &LaunchInfo::source)
      .def_readonly("root_address", &LaunchInfo::rootAddress)
      .def_readonly("rendezvous_key", &LaunchInfo::rendezvousKey);
  m.def("detect_launch", &detectLaunch, "Rank, size and rendezvous read from the launcher's environment.");

  py::class_<Bootstrap>(m, "Bootstrap")
      .def(py::init([](int rank, int nranks, const UniqueId& id, double timeout) {
             return std::make_unique<Bootstrap>(rank, nranks, id, timeout);
           }),
           py::arg("rank"), py::arg("nranks"), py::arg("unique_id"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def_static("from_environment", &Bootstrap::fromEnvironment, py::arg("timeout"),
                  py::call_guard<py::gil_scoped_release>());
}

}  // namespace forestcc::python
