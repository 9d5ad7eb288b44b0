// User arrays as (address, bytes, element type) for collectives: numpy arrays and PyTorch tensors
// (fast paths), objects with __cuda_array_interface__ (CuPy, Numba), DLPack tensors (JAX) and
// anything with the buffer protocol. Errors are TypeError / ValueError
// naming the argument.
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
  int device = -1;        // CUDA device ordinal of GPU memory; -1: host memory
  pybind11::object keep;  // keeps the memory (and a DLPack capsule) alive
};

// anyType: the caller needs the memory only (registration), so any element type is accepted
// (as uint8 when forestcc does not reduce it); count is then in elements of the array's own type.
ArrayView viewArray(pybind11::handle obj, const char* arg, bool needWritable, bool anyType = false);

}  // namespace forestcc::python
