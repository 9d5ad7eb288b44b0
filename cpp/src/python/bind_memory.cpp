#include "forestcc/memory.hpp"
#include "python/module.hpp"

namespace py = pybind11;

namespace forestcc::python {

void bindMemory(py::module_& m) {
  py::class_<SharedAllocation>(m, "SharedAllocation", py::buffer_protocol(),
                               "Host memory in a POSIX shared-memory segment that same-node peers map.")
      .def(py::init<size_t>(), py::arg("nbytes"))
      .def_property_readonly("nbytes", &SharedAllocation::size)
      .def_property_readonly("name", &SharedAllocation::name)
      .def_buffer([](SharedAllocation& a) {
        return py::buffer_info(a.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(a.size())}, {1});
      });

  py::class_<RegisteredMemory>(m, "RegisteredMemory", py::dynamic_attr(), "Memory registered with a communicator.")
      .def_property_readonly("nbytes", &RegisteredMemory::size)
      .def_property_readonly("address", [](const RegisteredMemory& r) { return reinterpret_cast<uintptr_t>(r.data()); })
      .def_property_readonly("shared_segment", &RegisteredMemory::sharedSegment,
                             "True when peers map it directly (allocated by forestcc.empty/zeros).");

  m.def("sweep_stale_shared_memory", &sweepStaleSharedMemory,
        "Unlink forestcc shared-memory segments whose owner process is dead; returns the count.");
  m.def("owned_shared_memory_segments", &ownedSharedMemorySegments);
}

}  // namespace forestcc::python
