// The inner loop of the plan verifier's vector clocks (python/forestcc/plan/clocks.py), in C++.
//
// Verifying a 1,024-rank forest plan joins clocks hundreds of millions of entries long in all,
// and that loop was most of the verifier's time in Python. The clocks stay Python dicts
// ({component: events seen}) that the verifier reads everywhere else; only the join is here,
// with exactly the rule of clocks.Components.join: an entry is taken when it raises the clock
// and, when projecting, when the clock's rank keeps the component.
#include <Python.h>

#include "python/module.hpp"

namespace py = pybind11;

namespace forestcc::python {

namespace {

// Whether a clock whose rank keeps the components in `kept` (a set; nullptr: keep everything)
// keeps `comp`.
bool keeps(PyObject* comp, PyObject* kept) {
  if (kept == nullptr) return true;
  int found = PySet_Contains(kept, comp);
  if (found < 0) throw py::error_already_set();
  return found != 0;
}

// clock[comp] = max(clock[comp], value) where kept; a raise is appended to `changed` as comp, value.
void joinEntry(PyObject* clock, PyObject* comp, PyObject* value, PyObject* kept, PyObject* changed) {
  long events = PyLong_AsLong(value);
  if (events == -1 && PyErr_Occurred()) throw py::error_already_set();
  PyObject* have = PyDict_GetItemWithError(clock, comp);  // borrowed
  if (have == nullptr && PyErr_Occurred()) throw py::error_already_set();
  long known = 0;
  if (have != nullptr) {
    known = PyLong_AsLong(have);
    if (known == -1 && PyErr_Occurred()) throw py::error_already_set();
  }
  if (events <= known || !keeps(comp, kept)) return;
  if (PyDict_SetItem(clock, comp, value) < 0 || PyList_Append(changed, comp) < 0 ||
      PyList_Append(changed, value) < 0) {
    throw py::error_already_set();
  }
}

PyObject* keptOf(const py::object& kept) { return kept.is_none() ? nullptr : kept.ptr(); }

void checkTypes(const py::object& clock, const py::object& kept, const py::object& changed) {
  if (!PyDict_Check(clock.ptr()) || !PyList_Check(changed.ptr()) ||
      !(kept.is_none() || PyAnySet_Check(kept.ptr()))) {
    throw py::type_error("join_clock: expected a dict clock, a set of kept components (or None) "
                         "and a list of changes");
  }
}

}  // namespace

void bindVerifierClocks(py::module_& plan) {
  plan.def(
      "join_clock",
      [](const py::object& clock, const py::object& other, const py::object& kept,
         const py::object& changed) {
        checkTypes(clock, kept, changed);
        if (!PyDict_Check(other.ptr())) throw py::type_error("join_clock: other must be a dict");
        PyObject* k = keptOf(kept);
        Py_ssize_t pos = 0;
        PyObject *comp, *value;
        while (PyDict_Next(other.ptr(), &pos, &comp, &value)) {
          joinEntry(clock.ptr(), comp, value, k, changed.ptr());
        }
      },
      py::arg("clock"), py::arg("other"), py::arg("kept"), py::arg("changed"),
      "The verifier's clock join (plan/clocks.py): clock = max(clock, other) over the components "
      "in kept (None: all), each raise appended to changed as comp, value.");
  plan.def(
      "join_clock_log",
      [](const py::object& clock, const py::object& log, Py_ssize_t start, Py_ssize_t end,
         const py::object& kept, const py::object& changed) {
        checkTypes(clock, kept, changed);
        if (!PyList_Check(log.ptr())) throw py::type_error("join_clock_log: log must be a list");
        if (start < 0 || end > PyList_GET_SIZE(log.ptr()) || (end - start) % 2 != 0) {
          throw py::index_error("join_clock_log: start/end outside the log or not in pairs");
        }
        PyObject* k = keptOf(kept);
        for (Py_ssize_t i = start; i + 1 < end; i += 2) {
          // The log may grow while we read it (a worker joining its own log never happens, but
          // the items are borrowed only for this step, so a list resized meanwhile is harmless).
          PyObject* comp = PyList_GET_ITEM(log.ptr(), i);
          PyObject* value = PyList_GET_ITEM(log.ptr(), i + 1);
          Py_INCREF(comp);
          Py_INCREF(value);
          try {
            joinEntry(clock.ptr(), comp, value, k, changed.ptr());
          } catch (...) {
            Py_DECREF(comp);
            Py_DECREF(value);
            throw;
          }
          Py_DECREF(comp);
          Py_DECREF(value);
        }
      },
      py::arg("clock"), py::arg("log"), py::arg("start"), py::arg("end"), py::arg("kept"),
      py::arg("changed"),
      "join_clock with the changes log[start:end] ((component, value) pairs flattened) of "
      "another clock for other.");
}

}  // namespace forestcc::python
