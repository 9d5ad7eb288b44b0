#include "python/op_dicts.hpp"

#include <algorithm>

namespace py = pybind11;

namespace forestcc::python {

namespace {

py::object steal(PyObject* o) {
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

py::object interned(const char* text) { return steal(PyUnicode_InternFromString(text)); }

}  // namespace

OpDicts::OpDicts() {
  for (const char* key : {"op", "ch", "src", "dst", "srcs", "remote", "n"}) keys_.push_back(interned(key));
  for (int b = 0; b < plan::kBufferCount; ++b) buffers_.push_back(interned(plan::name(plan::Buffer(b))));
  for (int c = 0; c < plan::kOpCount; ++c) codes_.push_back(interned(plan::name(plan::OpCode(c))));
}

py::object OpDicts::op(const plan::Op& op) {
  using plan::OpCode;
  py::object d = steal(PyDict_New());
  set(d, kOp, codes_[size_t(op.code)].ptr());
  switch (op.code) {
    case OpCode::Signal: case OpCode::Wait: case OpCode::Flush:
      set(d, kCh, integer(op.channel).ptr());
      return d;
    case OpCode::Put: case OpCode::Get: case OpCode::PutSignal:
      set(d, kCh, integer(op.channel).ptr());
      set(d, kSrc, ref(op.src).ptr());
      set(d, kDst, ref(op.dst).ptr());
      break;
    case OpCode::Copy:
      set(d, kSrc, ref(op.src).ptr());
      set(d, kDst, ref(op.dst).ptr());
      break;
    case OpCode::Reduce: case OpCode::ReducePut: case OpCode::GetReduce: {
      if (op.code != OpCode::Reduce) set(d, kCh, integer(op.channel).ptr());
      if (op.code == OpCode::GetReduce) set(d, kSrc, ref(op.src).ptr());
      set(d, kDst, ref(op.dst).ptr());
      py::object srcs = steal(PyList_New(op.sourceCount));
      for (int i = 0; i < op.sourceCount; ++i) PyList_SET_ITEM(srcs.ptr(), i, ref(op.sources[i]).release().ptr());
      set(d, kSrcs, srcs.ptr());
      if (op.code == OpCode::ReducePut) set(d, kRemote, ref(op.remote).ptr());
      break;
    }
  }
  if (op.count != 1) set(d, kN, integer(op.count).ptr());
  return d;
}

py::object SharedInts::operator()(int64_t value) {
  if (value < 0 || value >= limit_) return steal(PyLong_FromLongLong(value));
  if (size_t(value) >= ints_.size())
    ints_.resize(std::min<size_t>(size_t(limit_), std::max<size_t>(size_t(value) + 1, 2 * ints_.size())));
  py::object& slot = ints_[size_t(value)];
  if (!slot) slot = steal(PyLong_FromLongLong(value));
  return slot;
}

const py::object& OpDicts::transport(plan::Transport t) {
  if (transports_.empty()) {
    for (int i = 0; i < plan::kTransportCount; ++i) transports_.push_back(interned(plan::name(plan::Transport(i))));
  }
  return transports_[size_t(t)];
}

void OpDicts::set(const py::object& d, Key key, PyObject* value) {
  if (PyDict_SetItem(d.ptr(), keys_[key].ptr(), value) != 0) throw py::error_already_set();
}

py::object OpDicts::ref(const plan::ChunkRef& r) {
  py::object l = steal(PyList_New(2));
  py::object b = buffers_[size_t(r.buffer)];
  PyList_SET_ITEM(l.ptr(), 0, b.release().ptr());
  PyList_SET_ITEM(l.ptr(), 1, integer(r.index).release().ptr());
  return l;
}

}  // namespace forestcc::python
