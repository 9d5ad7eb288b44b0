// forestcc::Error -> Python: InvalidUsage becomes ValueError and InvalidType TypeError (bad
// arguments are refused before anything is sent); the others become forestcc exception classes carrying .rank and .peer.
// Also the interrupt check of native waits: Python's signal handlers run while a collective
// blocks (Ctrl-C raises KeyboardInterrupt instead of waiting out FORESTCC_TIMEOUT).
#include <thread>

#include "core/wait.hpp"
#include "forestcc/error.hpp"
#include "python/module.hpp"

namespace py = pybind11;

namespace forestcc::python {

namespace {

std::thread::id gMainThread;
// The exception a Python signal handler raised during a wait, re-raised by the translator
// (owned references; touched with the GIL held only).
PyObject* gPendingType = nullptr;
PyObject* gPendingValue = nullptr;
PyObject* gPendingTraceback = nullptr;

thread_local bool gInHandlers = false;  // running Python signal handlers from inside a wait

// Runs Python's signal handlers, which only the main thread does (as CPython does itself).
void checkPythonSignals() {
  if (std::this_thread::get_id() != gMainThread || !Py_IsInitialized()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  gInHandlers = true;
  const bool raised = PyErr_CheckSignals() != 0;
  gInHandlers = false;
  if (raised) {
    Py_XDECREF(gPendingType);
    Py_XDECREF(gPendingValue);
    Py_XDECREF(gPendingTraceback);
    PyErr_Fetch(&gPendingType, &gPendingValue, &gPendingTraceback);
  }
  PyGILState_Release(gil);
  if (raised) throw Error(ErrorCode::Interrupted, "forestcc: interrupted by a signal while waiting in a collective");
}

}  // namespace

void refuseInsideSignalHandler(const char* what) {
  if (gInHandlers)
    throw std::runtime_error(std::string("forestcc: ") + what +
                             " from a signal handler that interrupted a blocked forestcc call: it would wait on that "
                             "call; set a flag in the handler and communicate after the call returned");
}

void bindErrors(py::module_& m) {
  gMainThread = std::this_thread::get_id();
  setInterruptCheck(&checkPythonSignals);
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
  static PyObject* mismatch = derive(
      "forestcc._C.MismatchError",
      "The ranks' calls disagree (collective, root, dtype, op, count, algorithm or plan); raised on every rank of "
      "the call.", PyExc_ValueError);
  m.attr("ForestccError") = py::handle(base);
  m.attr("TimeoutError") = py::handle(timeout);
  m.attr("RemoteError") = py::handle(remote);
  m.attr("AbortedError") = py::handle(aborted);
  m.attr("MismatchError") = py::handle(mismatch);

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::Interrupted) {
        if (gPendingType) {
          PyErr_Restore(gPendingType, gPendingValue, gPendingTraceback);
          gPendingType = gPendingValue = gPendingTraceback = nullptr;
        } else {
          PyErr_SetNone(PyExc_KeyboardInterrupt);
        }
        return;
      }
      PyObject* cls = base;
      switch (e.code()) {
        case ErrorCode::InvalidUsage: cls = PyExc_ValueError; break;
        case ErrorCode::InvalidType: cls = PyExc_TypeError; break;
        case ErrorCode::Timeout: cls = timeout; break;
        case ErrorCode::Remote: cls = remote; break;
        case ErrorCode::Aborted: cls = aborted; break;
        case ErrorCode::Mismatch: cls = mismatch; break;
        default: break;
      }
      PyObject* exc = PyObject_CallFunction(cls, "s", e.what());
      if (!exc) return;
      if (cls != PyExc_ValueError && cls != PyExc_TypeError) {
        PyObject* rank = PyLong_FromLong(e.rank());
        PyObject* peer = PyLong_FromLong(e.peer());
        PyObject_SetAttrString(exc, "rank", rank);
        PyObject_SetAttrString(exc, "peer", peer);
        Py_DECREF(rank);
        Py_DECREF(peer);
      }
      if (cls != PyExc_ValueError && cls != PyExc_TypeError) {
        // Where in a collective it happened (None outside one): .collective, .plan, .worker, .step.
        const ErrorContext& c = e.context();
        auto set = [&](const char* attr, PyObject* value) {
          PyObject_SetAttrString(exc, attr, value);
          Py_DECREF(value);
        };
        auto textOrNone = [](const std::string& t) { return t.empty() ? Py_NewRef(Py_None) : PyUnicode_FromString(t.c_str()); };
        set("collective", textOrNone(c.collective));
        set("plan", textOrNone(c.plan));
        set("worker", c.worker < 0 ? Py_NewRef(Py_None) : PyLong_FromLong(c.worker));
        set("step", c.step < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(c.step));
      }
      PyErr_SetObject(cls, exc);
      Py_DECREF(exc);
    }
  });
}

}  // namespace forestcc::python
