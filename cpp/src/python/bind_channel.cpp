#include <optional>

#include "forestcc/channel.hpp"
#include "python/module.hpp"

#include <pybind11/stl.h>  // std::optional arguments

namespace py = pybind11;

namespace forestcc::python {

namespace {

// An offset or size as the C++ API takes it: a negative or too large Python int is a ValueError
// naming the argument (pybind11's own conversion error is a TypeError listing signatures).
uint64_t byteCount(const py::int_& v, const Channel& c, const char* op, const char* arg) {
  if (v < py::int_(0))
    throw py::value_error(std::string(op) + " on channel " + c.name() + ": " + arg + " is negative");
  if (v.attr("bit_length")().cast<int>() > 64)
    throw py::value_error(std::string(op) + " on channel " + c.name() + ": " + arg + " is 2**64 or more");
  return v.cast<uint64_t>();
}

template <void (Channel::*Move)(uint64_t, uint64_t, uint64_t)>
void moveBytes(Channel& c, const py::int_& dst, const py::int_& src, const py::int_& n, const char* op) {
  const uint64_t d = byteCount(dst, c, op, "dst_offset"), s = byteCount(src, c, op, "src_offset"),
                 b = byteCount(n, c, op, "nbytes");
  py::gil_scoped_release released;
  (c.*Move)(d, s, b);
}

}  // namespace

void bindChannel(py::module_& m) {
  using R = py::call_guard<py::gil_scoped_release>;
  py::class_<Channel, std::shared_ptr<Channel>>(m, "Channel", py::dynamic_attr(),
      "A one-sided channel to one peer: put/get/signal/wait/flush (see forestcc.MemoryChannel).")
      .def("put", [](Channel& c, const py::int_& d, const py::int_& s, const py::int_& n) { moveBytes<&Channel::put>(c, d, s, n, "put"); },
           py::arg("dst_offset"), py::arg("src_offset"), py::arg("nbytes"),
           "Copy local [src_offset, +nbytes) into the peer's memory at dst_offset.")
      .def("get", [](Channel& c, const py::int_& d, const py::int_& s, const py::int_& n) { moveBytes<&Channel::get>(c, d, s, n, "get"); },
           py::arg("dst_offset"), py::arg("src_offset"), py::arg("nbytes"),
           "Copy the peer's [src_offset, +nbytes) into local memory at dst_offset.")
      .def("signal", &Channel::signal, R(), "Make earlier puts visible to the peer's next wait().")
      .def("wait", [](Channel& c, std::optional<double> timeout) {
             if (timeout && !(*timeout >= 0))
               throw py::value_error("wait on channel " + c.name() + ": timeout must be None (the communicator's) "
                                     "or a number of seconds >= 0");
             py::gil_scoped_release released;
             c.wait(timeout ? *timeout : -1.0);
           },
           py::arg("timeout") = py::none(),
           "Block until the peer's next signal. With ``timeout`` (seconds) a wait that passes it raises "
           "forestcc.TimeoutError and leaves the channel usable (the next wait waits for the same signal); "
           "without, the communicator's timeout applies, and expiring poisons the communicator as any "
           "wait's does.")
      .def("test", &Channel::test, R(), "Consume the peer's next signal if it has arrived; never blocks.")
      .def("flush", &Channel::flush, R(), "Wait until this channel's puts have completed.")
      .def("put_with_signal",
           [](Channel& c, const py::int_& d, const py::int_& s, const py::int_& n) {
             moveBytes<&Channel::putWithSignal>(c, d, s, n, "put_with_signal");
           },
           py::arg("dst_offset"), py::arg("src_offset"), py::arg("nbytes"))
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
