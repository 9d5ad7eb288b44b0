// forestcc::Error -> Python: InvalidUsage becomes ValueError (bad arguments are refused before
// anything is sent); the others become forestcc exception classes carrying .rank and .peer.
#include "forestcc/error.hpp"
#include "python/module.hpp"

namespace py = pybind11;

namespace forestcc::python {

void bindErrors(py::module_& m) {
  static PyObject* base = PyErr_NewExceptionWithDoc(
      "forestcc._C.ForestccError", "A forestcc operation failed; .rank and .peer name who saw and who caused it.",
      PyExc_RuntimeError, nullptr);
  auto derive = [](const char* name, const char* doc, PyObject* extra) {
    PyObject* bases = extra ? PyTuple_Pack(2, base, extra) : PyTuple_Pack(1, base);
    PyObject* cls = PyErr_NewExceptionWithDoc(name, doc, bases, nullptr);
    Py_DECREF(bases);
    return cls;
  };
  static PyObject* timeout = derive("forestcc._C.TimeoutError", "A wait or rendezvous passed its deadline.", PyExc_TimeoutError);
  static PyObject* remote = derive("forestcc._C.RemoteError", "A peer failed, closed its connection or died.", PyExc_ConnectionError);
  static PyObject* aborted = derive("forestcc._C.AbortedError", "The communicator was poisoned by an earlier error.", nullptr);
  m.attr("ForestccError") = py::handle(base);
  m.attr("TimeoutError") = py::handle(timeout);
  m.attr("RemoteError") = py::handle(remote);
  m.attr("AbortedError") = py::handle(aborted);

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyObject* cls = base;
      switch (e.code()) {
        case ErrorCode::InvalidUsage: cls = PyExc_ValueError; break;
        case ErrorCode::Timeout: cls = timeout; break;
        case ErrorCode::Remote: cls = remote; break;
        case ErrorCode::Aborted: cls = aborted; break;
        default: break;
      }
      PyObject* exc = PyObject_CallFunction(cls, "s", e.what());
      if (!exc) return;
      if (cls != PyExc_ValueError) {
        PyObject* rank = PyLong_FromLong(e.rank());
        PyObject* peer = PyLong_FromLong(e.peer());
        PyObject_SetAttrString(exc, "rank", rank);
        PyObject_SetAttrString(exc, "peer", peer);
        Py_DECREF(rank);
        Py_DECREF(peer);
      }
      PyErr_SetObject(cls, exc);
      Py_DECREF(exc);
    }
  });
}

}  // namespace forestcc::python
