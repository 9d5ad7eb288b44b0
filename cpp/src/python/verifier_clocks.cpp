// The inner loop of the plan verifier's vector clocks (python/forestcc/plan/clocks.py), in C++.
//
// Verifying a 1,024-rank forest plan joins clocks hundreds of millions of entries long in all,
// and that loop was most of the verifier's time in Python. The clocks stay Python dicts
// ({component: events seen}) that the verifier reads everywhere else; only the join is here,
// with exactly the rule of clocks.Components.join: an entry is taken when it raises the clock
// and, when projecting, when the clock's rank keeps the component.
#include <Python.h>

#include <unordered_map>
#include <utility>
#include <vector>

#include "python/module.hpp"
#include "python/verifier_kept.hpp"

namespace py = pybind11;

namespace forestcc::python {

namespace {

// What a clock of one rank keeps (nullptr: everything).
struct Keeping {
  const verifier::KeptComponents* kept;
  size_t rank;

  bool keeps(PyObject* comp) const {
    if (kept == nullptr) return true;
    long c = PyLong_AsLong(comp);
    if (c == -1 && PyErr_Occurred()) throw py::error_already_set();
    return c >= 0 && c <= static_cast<long>(UINT32_MAX) && kept->keeps(rank, static_cast<uint32_t>(c));
  }
};

// clock[comp] = max(clock[comp], value) where kept; a raise is appended to `changed` as comp, value.
void joinEntry(PyObject* clock, PyObject* comp, PyObject* value, const Keeping& kept, PyObject* changed) {
  long events = PyLong_AsLong(value);
  if (events == -1 && PyErr_Occurred()) throw py::error_already_set();
  PyObject* have = PyDict_GetItemWithError(clock, comp);  // borrowed
  if (have == nullptr && PyErr_Occurred()) throw py::error_already_set();
  long known = 0;
  if (have != nullptr) {
    known = PyLong_AsLong(have);
    if (known == -1 && PyErr_Occurred()) throw py::error_already_set();
  }
  if (events <= known || !kept.keeps(comp)) return;
  if (PyDict_SetItem(clock, comp, value) < 0 || PyList_Append(changed, comp) < 0 ||
      PyList_Append(changed, value) < 0) {
    throw py::error_already_set();
  }
}

Keeping keepingOf(const py::object& kept, size_t rank) {
  if (kept.is_none()) return {nullptr, 0};
  const auto* components = kept.cast<const verifier::KeptComponents*>();
  if (rank >= components->ranks()) throw py::index_error("join_clock: rank outside the kept components");
  return {components, rank};
}

void checkTypes(const py::object& clock, const py::object& changed) {
  if (!PyDict_Check(clock.ptr()) || !PyList_Check(changed.ptr())) {
    throw py::type_error("join_clock: expected a dict clock and a list of changes");
  }
}

}  // namespace

void bindVerifierClocks(py::module_& plan) {
  plan.def(
      "join_clock_replayed",
      [](const py::object& clock, const py::object& log, Py_ssize_t end, const py::object& kept, size_t rank,
         const py::object& changed) {
        checkTypes(clock, changed);
        if (!PyList_Check(log.ptr())) throw py::type_error("join_clock_replayed: log must be a list");
        if (end < 0 || end > PyList_GET_SIZE(log.ptr()) || end % 2 != 0) {
          throw py::index_error("join_clock_replayed: end outside the log or not in pairs");
        }
        // The clock the log describes up to `end`: each component once, in the order it first
        // appears (the order the clock's dict had), at its last (largest) value.
        std::vector<std::pair<PyObject*, PyObject*>> replayed;
        std::unordered_map<long, size_t> position;
        for (Py_ssize_t i = 0; i + 1 < end; i += 2) {
          PyObject* comp = PyList_GET_ITEM(log.ptr(), i);
          long c = PyLong_AsLong(comp);
          if (c == -1 && PyErr_Occurred()) throw py::error_already_set();
          auto [it, fresh] = position.try_emplace(c, replayed.size());
          if (fresh) {
            replayed.emplace_back(comp, PyList_GET_ITEM(log.ptr(), i + 1));
          } else {
            replayed[it->second].second = PyList_GET_ITEM(log.ptr(), i + 1);
          }
        }
        // Held while joined: the log may not change meanwhile, but the items are borrowed.
        for (auto& [comp, value] : replayed) Py_INCREF(comp), Py_INCREF(value);
        const Keeping k = keepingOf(kept, rank);
        try {
          for (const auto& [comp, value] : replayed) joinEntry(clock.ptr(), comp, value, k, changed.ptr());
        } catch (...) {
          for (auto& [comp, value] : replayed) Py_DECREF(comp), Py_DECREF(value);
          throw;
        }
        for (auto& [comp, value] : replayed) Py_DECREF(comp), Py_DECREF(value);
      },
      py::arg("clock"), py::arg("log"), py::arg("end"), py::arg("kept"), py::arg("rank"), py::arg("changed"),
      "The verifier's clock join (plan/clocks.py) of another clock given by its change log up to end "
      "((component, value) pairs flattened, from the clock's start): clock = max(clock, that clock) over "
      "the components rank keeps by kept (KeptComponents; None: all), each raise appended to changed as "
      "comp, value, in the order the other clock's components first appear in its log.");
  plan.def(
      "join_clock_log",
      [](const py::object& clock, const py::object& log, Py_ssize_t start, Py_ssize_t end,
         const py::object& kept, size_t rank, const py::object& changed) {
        checkTypes(clock, changed);
        if (!PyList_Check(log.ptr())) throw py::type_error("join_clock_log: log must be a list");
        if (start < 0 || end > PyList_GET_SIZE(log.ptr()) || (end - start) % 2 != 0) {
          throw py::index_error("join_clock_log: start/end outside the log or not in pairs");
        }
        const Keeping k = keepingOf(kept, rank);
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
      py::arg("rank"), py::arg("changed"),
      "join_clock with the changes log[start:end] ((component, value) pairs flattened) of "
      "another clock for other.");
}

}  // namespace forestcc::python
