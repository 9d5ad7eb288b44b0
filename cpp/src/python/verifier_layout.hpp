// Where a chunk reference of a plan dict lands in memory, for the verifier's C++ parts
// (verifier_coaccess.cpp, verifier_memory.cpp): every chunk of every rank as one number, the
// rank's input, output and scratch end to end, with in-place aliasing resolved as
// python/forestcc/plan/geometry.py alias_function does.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "forestcc/plan.hpp"

namespace forestcc::python::verifier {

// How a plan's buffers alias in place (geometry.alias_kind's numbers).
enum class Alias : int { None = 0, InputIsOutput = 1, InputInOutput = 2, OutputInInput = 3 };

inline int64_t toInt(PyObject* value) {
  long long v = PyLong_AsLongLong(value);
  if (v == -1 && PyErr_Occurred()) throw pybind11::error_already_set();
  return v;
}

// The buffer a plan names ("input", "output", "scratch"); the plan is valid, so it is one of them.
inline plan::Buffer bufferNamed(PyObject* text) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_Check(text) ? PyUnicode_AsUTF8AndSize(text, &size) : nullptr;
  plan::Buffer buffer{};
  if (data == nullptr || !plan::parse(std::string(data, static_cast<size_t>(size)), buffer)) {
    PyErr_Clear();
    throw pybind11::value_error("verifier: a chunk ref names no buffer");
  }
  return buffer;
}

struct Layout {
  int64_t size[plan::kBufferCount] = {};  // chunks of input, output, scratch
  int64_t perRank = 0;                    // chunks of one rank's memory, the buffers end to end
  int64_t k = 1;
  Alias alias = Alias::None;

  Layout(const pybind11::handle& sizes, int64_t chunksPerBlock, int aliasKind)
      : k(chunksPerBlock), alias(static_cast<Alias>(aliasKind)) {
    for (int b = 0; b < plan::kBufferCount; ++b) size[b] = pybind11::cast<int64_t>(sizes[pybind11::int_(b)]);
    perRank = size[0] + size[1] + size[2];
  }

  int64_t base(plan::Buffer buffer) const {
    return buffer == plan::Buffer::Input ? 0 : buffer == plan::Buffer::Output ? size[0] : size[0] + size[1];
  }

  // The chunk of memory a [buffer, index] reference of `rank` names, as one number for all ranks.
  uint64_t location(int64_t rank, PyObject* ref) const {
    if (!PyList_Check(ref) && !PyTuple_Check(ref)) throw pybind11::type_error("verifier: a chunk ref is not a list");
    if (PySequence_Fast_GET_SIZE(ref) != 2) throw pybind11::value_error("verifier: a chunk ref is not [buffer, index]");
    plan::Buffer buffer = bufferNamed(PySequence_Fast_GET_ITEM(ref, 0));
    int64_t index = toInt(PySequence_Fast_GET_ITEM(ref, 1));
    if (buffer == plan::Buffer::Input && alias == Alias::InputIsOutput) {
      buffer = plan::Buffer::Output;
    } else if (buffer == plan::Buffer::Input && alias == Alias::InputInOutput) {
      buffer = plan::Buffer::Output;
      index += rank * k;
    } else if (buffer == plan::Buffer::Output && alias == Alias::OutputInInput) {
      buffer = plan::Buffer::Input;
      index += rank * k;
    }
    return static_cast<uint64_t>(rank * perRank + base(buffer) + index);
  }
};

}  // namespace forestcc::python::verifier
