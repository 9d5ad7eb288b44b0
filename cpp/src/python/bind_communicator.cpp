#include "forestcc/communicator.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"
#include "python/array_view.hpp"
#include "python/module.hpp"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace forestcc::python {

namespace {
// A timeout of None / <= 0 means the configured default (FORESTCC_TIMEOUT).
double timeoutOrDefault(double t) { return t > 0 ? t : config::timeoutSeconds(); }
}  // namespace

void bindCommunicator(py::module_& m) {
  using R = py::call_guard<py::gil_scoped_release>;
  py::class_<Communicator, std::shared_ptr<Communicator>>(m, "Communicator", py::dynamic_attr())
      .def_static("from_environment", [](double timeout) {
        return std::make_shared<Communicator>(Bootstrap::fromEnvironment(timeoutOrDefault(timeout)));
      }, py::arg("timeout") = 0.0, R())
      .def_static("from_unique_id", [](const UniqueId& id, int rank, int size, double timeout) {
        return std::make_shared<Communicator>(std::make_unique<Bootstrap>(rank, size, id, timeoutOrDefault(timeout)));
      }, py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("timeout") = 0.0, R())
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly("local_rank", &Communicator::localRank)
      .def_property_readonly("local_size", &Communicator::localSize)
      .def_property_readonly("node_count", &Communicator::nodeCount)
      .def_property_readonly("local_ranks", &Communicator::localRanks)
      .def_property_readonly("timeout", &Communicator::timeoutSeconds)
      .def_property_readonly("spin_us", &Communicator::spinMicroseconds)
      .def_property_readonly("yield_us", &Communicator::yieldMicroseconds)
      .def("node_of", &Communicator::nodeOf, py::arg("rank"))
      .def("node_name", &Communicator::nodeName, py::arg("rank"))
      // An array's memory, seen as collectives see arrays (viewArray), any element type.
      .def("register_array", [](Communicator& c, py::handle array) {
        const ArrayView v = viewArray(array, "array", false, true);
        if (v.device >= 0)
          throw py::type_error("array: GPU memory cannot be registered for memory channels (their transports, "
                               "shm, cma and tcp, move host memory); pass host memory");
        if (!v.writable)
          throw py::value_error("array: is read-only, but peers may put into registered memory (JAX arrays are "
                                "immutable: register a writable copy, e.g. numpy.array(x))");
        py::object mem = py::cast(c.registerMemory(v.data, v.bytes));
        mem.attr("_array") = v.keep;  // the registration keeps the memory alive
        return mem;
      }, py::arg("array"))
      .def("connect", py::overload_cast<const std::vector<int>&, const RegisteredMemory&, uint64_t>(&Communicator::connect),
           py::arg("peers"), py::arg("memory"), py::arg("tag") = 0, R())
      .def("abort", &Communicator::abort, py::arg("reason"))
      .def("check_healthy", &Communicator::checkHealthy)
      .def("peer_left", &Communicator::peerLeft, py::arg("rank"))
      // A bootstrap exchange runs the program's signal handlers while it waits (Ctrl-C), holding
      // the bootstrap: a handler may not start another one there.
      .def("bootstrap_all_gather", [](Communicator& c, py::bytes mine) {
        refuseInsideSignalHandler("a bootstrap exchange");
        std::string in(mine);
        std::vector<std::string> out;
        {
          py::gil_scoped_release r;
          out = c.bootstrap().allGather(in);
        }
        py::list l;
        for (auto& s : out) l.append(py::bytes(s));
        return l;
      }, py::arg("data"))
      .def("bootstrap_barrier", [](Communicator& c) {
        refuseInsideSignalHandler("a bootstrap exchange");
        py::gil_scoped_release r;
        c.bootstrap().barrier();
      })
      .def("bootstrap_send", [](Communicator& c, int peer, py::bytes data, uint64_t tag) {
        refuseInsideSignalHandler("a bootstrap exchange");
        if (tag >= Bootstrap::kInternalTag)
          throw Error(ErrorCode::InvalidUsage, "forestcc: bootstrap tags must be below 2**63");
        std::string in(data);
        py::gil_scoped_release r;
        c.bootstrap().send(peer, tag, in);
      }, py::arg("peer"), py::arg("data"), py::arg("tag") = 0)
      .def("bootstrap_recv", [](Communicator& c, int peer, uint64_t tag) {
        refuseInsideSignalHandler("a bootstrap exchange");
        if (tag >= Bootstrap::kInternalTag)
          throw Error(ErrorCode::InvalidUsage, "forestcc: bootstrap tags must be below 2**63");
        std::string out;
        {
          py::gil_scoped_release r;
          out = c.bootstrap().recv(peer, tag);
        }
        return py::bytes(out);
      }, py::arg("peer"), py::arg("tag") = 0);
}

}  // namespace forestcc::python
