#include "python/array_view.hpp"

#include <pybind11/numpy.h>

#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace forestcc::python {

namespace {

// The DLPack ABI (dlpack.h, v0.x, the unversioned capsule "dltensor" every framework exports).
struct DLDevice { int32_t device_type; int32_t device_id; };
struct DLDataType { uint8_t code; uint8_t bits; uint16_t lanes; };
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
constexpr int32_t kDLCPU = 1, kDLCUDA = 2, kDLCUDAManaged = 13;
constexpr uint8_t kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4;
constexpr uint8_t kDLFloat8_e4m3fn = 10, kDLFloat8_e5m2 = 12;  // DLPack 1.1 (PyTorch exports them)

constexpr bool kLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

const char* kSupported =
    "int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, float64, float8_e4m3fn, float8_e5m2";

[[noreturn]] void unsupported(const char* arg, const std::string& what) {
  throw py::type_error(std::string(arg) + ": dtype " + what + " is not supported (supported: " + kSupported + ")");
}

// anyType: the caller needs the bytes only (memory registration): an unsupported type is bytes.
DataType fromKind(char kind, size_t size, const char* arg, const std::string& name, bool anyType) {
  if (kind == 'i' && size == 1) return DataType::Int8;
  if (kind == 'i' && size == 4) return DataType::Int32;
  if (kind == 'i' && size == 8) return DataType::Int64;
  if (kind == 'u' && size == 1) return DataType::Uint8;
  if (kind == 'u' && size == 4) return DataType::Uint32;
  if (kind == 'u' && size == 8) return DataType::Uint64;
  if (kind == 'f' && size == 2) return DataType::Float16;
  if (kind == 'f' && size == 4) return DataType::Float32;
  if (kind == 'f' && size == 8) return DataType::Float64;
  // ml_dtypes' types are numpy kind 'V'; DLPack's are named the same below.
  if (name == "bfloat16" && size == 2) return DataType::BFloat16;
  if (name == "float8_e4m3fn" && size == 1) return DataType::Float8E4M3;
  if (name == "float8_e5m2" && size == 1) return DataType::Float8E5M2;
  if (anyType) return DataType::Uint8;
  unsupported(arg, name);
}

ArrayView fromNumpy(const py::array& a, const char* arg, bool anyType) {
  ArrayView v;
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string(arg) + ": must be C-contiguous (pass a contiguous copy, e.g. numpy.ascontiguousarray)");
  py::dtype dt = a.dtype();
  const char kind = dt.kind();
  const size_t size = static_cast<size_t>(dt.itemsize());
  // Not even as bytes (registration): its elements are this process's pointers to Python
  // objects, meaningless elsewhere, and bytes put into it would be taken for objects (a crash).
  if (kind == 'O')
    throw py::type_error(std::string(arg) + ": dtype object holds pointers to Python objects, not data; "
                         "pass an array of numbers");
  // Collectives reduce and deliver data in this machine's byte order: a swapped array's bytes would be
  // read as other numbers (and an output's written as other numbers), a silent wrong answer.
  // Registration (anyType) moves bytes only.
  const char order = dt.byteorder();
  if (!anyType && size > 1 && order != '=' && order != '|' && order != (kLittleEndian ? '<' : '>'))
    throw py::type_error(std::string(arg) + ": dtype " + std::string(py::str(dt.attr("str"))) +
                         " is not in this machine's byte order; pass a copy in native order, e.g. "
                         "x.astype(x.dtype.newbyteorder('='))");
  // The common numeric kinds need no name (building one costs more than the rest of a small call).
  // 2-byte and 1-byte floats do: ml_dtypes' bfloat16 and float8_e4m3fn are kind 'V', but its
  // float8_e5m2 is kind 'f'.
  const bool plain = (kind == 'i' || kind == 'u' || (kind == 'f' && size >= 4)) && size != 2 && size <= 8;
  v.dtype = fromKind(kind, size, arg,
                     plain ? std::string()
                     : kind == 'V' || kind == 'b' || kind == 'c' || size <= 2 ? std::string(py::str(dt.attr("name")))
                                                                             : std::string(1, kind) + std::to_string(size * 8),
                     anyType);
  v.data = const_cast<void*>(a.data());
  v.count = static_cast<size_t>(a.size());
  v.bytes = v.count * static_cast<size_t>(dt.itemsize());
  v.writable = a.writeable();
  v.keep = a;
  return v;
}

// JAX arrays are immutable: writing into one would change a value JAX believes constant. What
// they export does not always say so (DLPack has no read-only flag before version 1.0).
bool isJaxArray(py::handle obj) {
  const std::string module = py::str(py::type::handle_of(obj).attr("__module__"));
  return module.rfind("jax", 0) == 0;  // jax and jaxlib
}

ArrayView fromDlpack(py::handle obj, const char* arg, bool anyType) {
  py::object capsule;
  try {
    capsule = obj.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    throw py::type_error(std::string(arg) + ": cannot export this " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
                         " through DLPack (" + e.what() + ")");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (!managed) {
    PyErr_Clear();
    throw py::type_error(std::string(arg) + ": __dlpack__ did not return a DLPack tensor capsule");
  }
  const DLTensor& t = managed->dl_tensor;
  const bool gpu = t.device.device_type == kDLCUDA;
  if (t.device.device_type != kDLCPU && !gpu)
    throw py::type_error(std::string(arg) + ": is in memory forestcc cannot reach (DLPack device type " +
                         std::to_string(t.device.device_type) + (t.device.device_type == kDLCUDAManaged ? ", CUDA managed" : "") +
                         "); pass host memory or CUDA device memory");
  if (t.dtype.lanes != 1) unsupported(arg, "with " + std::to_string(t.dtype.lanes) + " lanes");
  const size_t size = t.dtype.bits / 8;
  const uint8_t code = t.dtype.code;
  const std::string name = code == kDLFloat8_e4m3fn ? "float8_e4m3fn" : code == kDLFloat8_e5m2 ? "float8_e5m2"
                           : (code == kDLInt ? "int" : code == kDLUInt ? "uint" : code == kDLFloat ? "float"
                              : code == kDLBfloat ? "bfloat" : "code" + std::to_string(code)) + std::to_string(t.dtype.bits);
  const char kind = code == kDLInt ? 'i' : code == kDLUInt ? 'u' : code == kDLFloat ? 'f' : 'V';
  ArrayView v;
  v.dtype = fromKind(kind, size, arg, name, anyType);
  size_t count = 1;
  for (int i = 0; i < t.ndim; ++i) count *= static_cast<size_t>(t.shape[i]);
  if (t.strides && count > 1) {
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expect)
        throw py::value_error(std::string(arg) + ": must be contiguous (pass a contiguous copy, e.g. .contiguous())");
      expect *= t.shape[i];
    }
  }
  v.data = static_cast<char*>(t.data) + t.byte_offset;
  v.count = count;
  v.bytes = count * size;
  v.writable = !isJaxArray(obj);
  v.device = gpu ? t.device.device_id : -1;
  v.keep = py::make_tuple(obj, capsule);
  return v;
}

// PyTorch tensors (CPU and CUDA) through their own methods. Their __cuda_array_interface__ and
// __dlpack__ are Python code that costs ~10 us each (the interface twice: hasattr, then the
// read): more than a small collective on a GPU. nullptr until torch was imported.
PyObject* torchTensorType() {
  static PyObject* type = nullptr;
  if (!type) {
    PyObject* torch = PyImport_GetModule(py::str("torch").ptr());  // never imports it
    if (!torch) return nullptr;
    type = PyObject_GetAttrString(torch, "Tensor");  // kept for the process's life
    Py_DECREF(torch);
    if (!type) PyErr_Clear();
  }
  return type;
}

DataType torchDtype(py::handle dtype, const char* arg, bool anyType) {
  // torch's dtype objects are singletons: found by identity after the first call.
  static std::vector<std::pair<PyObject*, DataType>>* known = [] {
    auto* out = new std::vector<std::pair<PyObject*, DataType>>;
    const py::module_ torch = py::module_::import("torch");
    const std::pair<const char*, DataType> names[] = {
        {"int8", DataType::Int8},       {"uint8", DataType::Uint8},     {"int32", DataType::Int32},
        {"uint32", DataType::Uint32},   {"int64", DataType::Int64},     {"uint64", DataType::Uint64},
        {"float16", DataType::Float16}, {"bfloat16", DataType::BFloat16}, {"float32", DataType::Float32},
        {"float64", DataType::Float64}, {"float8_e4m3fn", DataType::Float8E4M3}, {"float8_e5m2", DataType::Float8E5M2}};
    for (const auto& [name, type] : names)
      if (py::hasattr(torch, name)) out->emplace_back(torch.attr(name).ptr(), type);  // torch keeps them alive
    return out;
  }();
  for (const auto& [object, type] : *known)
    if (object == dtype.ptr()) return type;
  if (anyType) return DataType::Uint8;
  unsupported(arg, py::str(dtype));
}

// False: not a tensor this path reads (not torch, or on another device kind): the caller goes on.
bool fromTorch(py::handle obj, const char* arg, bool anyType, ArrayView& v) {
  PyObject* tensor = torchTensorType();
  if (!tensor || PyObject_IsInstance(obj.ptr(), tensor) != 1) return false;
  const bool cuda = obj.attr("is_cuda").cast<bool>();
  if (!cuda && !obj.attr("is_cpu").cast<bool>()) return false;
  if (!obj.attr("is_contiguous")().cast<bool>())
    throw py::value_error(std::string(arg) + ": must be contiguous (pass a contiguous copy, e.g. .contiguous())");
  v.dtype = torchDtype(obj.attr("dtype"), arg, anyType);
  v.count = obj.attr("numel")().cast<size_t>();
  v.bytes = v.count * (anyType ? obj.attr("element_size")().cast<size_t>() : elementSize(v.dtype));
  v.data = reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>());
  v.device = cuda ? obj.attr("get_device")().cast<int>() : -1;
  v.writable = true;
  v.keep = py::reinterpret_borrow<py::object>(obj);
  return true;
}

// __cuda_array_interface__ (version 2 or 3): CuPy arrays, PyTorch CUDA tensors, Numba arrays.
// Returns false when the object's interface refuses (PyTorch raises for bfloat16 and float8):
// the caller then goes through DLPack.
bool fromCudaInterface(py::handle obj, const char* arg, bool anyType, ArrayView& v) {
  py::dict cai;
  try {
    cai = obj.attr("__cuda_array_interface__");
  } catch (py::error_already_set&) {
    return false;
  }
  const std::string typestr = py::str(cai["typestr"]);
  // PyTorch describes bfloat16 and float8 as opaque bytes ("<V2"): DLPack names them.
  if (typestr.size() >= 2 && typestr[1] == 'V') return false;
  if (typestr.size() < 3 || (typestr[0] == '>' && typestr.substr(2) != "1"))
    throw py::type_error(std::string(arg) + ": unsupported __cuda_array_interface__ typestr '" + typestr + "'");
  const size_t size = std::stoul(typestr.substr(2));
  const py::tuple shape = cai["shape"];
  size_t count = 1;
  for (auto d : shape) count *= d.cast<size_t>();
  if (cai.contains("strides") && !cai["strides"].is_none() && count > 1) {
    const py::tuple strides = cai["strides"];
    int64_t expect = static_cast<int64_t>(size);
    for (ssize_t i = static_cast<ssize_t>(shape.size()) - 1; i >= 0; --i) {
      const int64_t extent = shape[i].cast<int64_t>();
      if (extent != 1 && strides[i].cast<int64_t>() != expect)
        throw py::value_error(std::string(arg) + ": must be contiguous (pass a contiguous copy)");
      expect *= extent;
    }
  }
  v.dtype = fromKind(typestr[1], size, arg, typestr, anyType);
  const py::tuple data = cai["data"];
  v.data = reinterpret_cast<void*>(data[0].cast<uintptr_t>());
  v.writable = !data[1].cast<bool>();
  v.count = count;
  v.bytes = count * size;
  v.device = 0;  // the collective API finds the device of the pointer
  v.keep = py::reinterpret_borrow<py::object>(obj);
  return true;
}

}  // namespace

ArrayView viewArray(py::handle obj, const char* arg, bool needWritable, bool anyType) {
  ArrayView v;
  if (py::isinstance<py::array>(obj)) {
    v = fromNumpy(py::reinterpret_borrow<py::array>(obj), arg, anyType);
  } else if (obj.is_none()) {
    throw py::type_error(std::string(arg) + ": expected an array, got None");
  } else if (fromTorch(obj, arg, anyType, v)) {
  } else if (py::hasattr(obj, "__cuda_array_interface__") && fromCudaInterface(obj, arg, anyType, v)) {
    if (v.writable && isJaxArray(obj)) v.writable = false;  // JAX GPU arrays
  } else if (py::hasattr(obj, "__dlpack__") && !PyObject_CheckBuffer(obj.ptr())) {
    v = fromDlpack(obj, arg, anyType);
  } else if (PyObject_CheckBuffer(obj.ptr())) {
    try {
      py::object arr = py::module_::import("numpy").attr("asarray")(py::memoryview(py::reinterpret_borrow<py::object>(obj)));
      v = fromNumpy(arr.cast<py::array>(), arg, anyType);
    } catch (py::error_already_set& e) {
      // JAX exports bfloat16 and float8 arrays through DLPack only (its buffer protocol raises
      // BufferError for them).
      if (!e.matches(PyExc_BufferError) || !py::hasattr(obj, "__dlpack__")) throw;
      v = fromDlpack(obj, arg, anyType);
    }
  } else {
    throw py::type_error(std::string(arg) + ": expected an array (numpy, PyTorch, JAX, or any object with the "
                         "buffer protocol or DLPack), got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  if (needWritable && !v.writable)
    throw py::value_error(std::string(arg) + ": is read-only but forestcc must write the result into it"
                          " (JAX arrays are immutable: pass a writable out=, e.g. numpy.empty_like)");
  return v;
}

}  // namespace forestcc::python
