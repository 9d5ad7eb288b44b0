// User arrays as (address, bytes, element type) for collectives: numpy arrays (fast path),
// DLPack CPU tensors (PyTorch, JAX; bfloat16 included) and anything with the buffer protocol.
// Errors are TypeError / ValueError naming the argument.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>

#include "forestcc/collectives.hpp"

namespace forestcc::python {

struct ArrayView {
  void* data = nullptr;
  size_t bytes = 0;
  size_t count = 0;
  DataType dtype = DataType::Float32;
  bool writable = true;
  pybind11::object keep;  // keeps the memory (and a DLPack capsule) alive
};

ArrayView viewArray(pybind11::handle obj, const char* arg, bool needWritable);

}  // namespace forestcc::python
