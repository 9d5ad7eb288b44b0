#include "forestcc/cuda.hpp"
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

  // forestcc.cuda.empty's memory: one cudaMalloc, exported to frameworks through
  // __cuda_array_interface__ (bytes), freed when the last array over it goes.
  struct DeviceAllocation {
    void* data;
    size_t size;
    explicit DeviceAllocation(size_t n) : data(cudaAllocate(n)), size(n) {}
    ~DeviceAllocation() { cudaRelease(data); }
    DeviceAllocation(const DeviceAllocation&) = delete;
    DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  };
  py::class_<DeviceAllocation>(m, "DeviceAllocation", "Device memory from cudaMalloc (shareable through CUDA IPC).")
      .def(py::init<size_t>(), py::arg("nbytes"))
      .def_property_readonly("address", [](const DeviceAllocation& a) { return reinterpret_cast<uintptr_t>(a.data); })
      .def_property_readonly("size", [](const DeviceAllocation& a) { return a.size; })
      .def_property_readonly("__cuda_array_interface__", [](const DeviceAllocation& a) {
        py::dict d;
        d["shape"] = py::make_tuple(a.size);
        d["typestr"] = "|u1";
        d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(a.data), false);
        d["version"] = 3;
        d["strides"] = py::none();
        d["stream"] = py::none();
        return d;
      });

  m.def("sweep_stale_shared_memory", &sweepStaleSharedMemory,
        "Unlink forestcc shared-memory segments whose owner process is dead; returns the count.");
  m.def("owned_shared_memory_segments", &ownedSharedMemorySegments);
}

}  // namespace forestcc::python
