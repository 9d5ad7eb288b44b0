#include "forestcc/channel.hpp"
#include "python/module.hpp"

namespace py = pybind11;

namespace forestcc::python {

void bindChannel(py::module_& m) {
  using R = py::call_guard<py::gil_scoped_release>;
  py::class_<Channel, std::shared_ptr<Channel>>(m, "Channel", py::dynamic_attr(),
      "A one-sided channel to one peer: put/get/signal/wait/flush (see forestcc.MemoryChannel).")
      .def("put", &Channel::put, py::arg("dst_offset"), py::arg("src_offset"), py::arg("nbytes"), R(),
           "Copy local [src_offset, +nbytes) into the peer's memory at dst_offset.")
      .def("get", &Channel::get, py::arg("dst_offset"), py::arg("src_offset"), py::arg("nbytes"), R(),
           "Copy the peer's [src_offset, +nbytes) into local memory at dst_offset.")
      .def("signal", &Channel::signal, R(), "Make earlier puts visible to the peer's next wait().")
      .def("wait", &Channel::wait, py::arg("timeout") = -1.0, R(),
           "Block until the peer's next signal; raises forestcc.TimeoutError naming the peer.")
      .def("test", &Channel::test, R(), "Consume the peer's next signal if it has arrived; never blocks.")
      .def("flush", &Channel::flush, R(), "Wait until this channel's puts have completed.")
      .def("put_with_signal", &Channel::putWithSignal, py::arg("dst_offset"), py::arg("src_offset"),
           py::arg("nbytes"), R())
      .def_property_readonly("peer", &Channel::peer)
      .def_property_readonly("transport", [](const Channel& c) { return transportName(c.transport()); })
      .def_property_readonly("local_nbytes", &Channel::localSize)
      .def_property_readonly("remote_nbytes", &Channel::remoteSize)
      .def_property_readonly("name", &Channel::name)
      .def("__repr__", [](const Channel& c) {
        return "<forestcc channel " + c.name() + " over " + transportName(c.transport()) + ">";
      });
}

}  // namespace forestcc::python
