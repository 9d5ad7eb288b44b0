#include "python/plan_dict.hpp"

#include <cstdint>
#include <string>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "forestcc/error.hpp"
#include "plan/plan_json.hpp"
#include "python/op_dicts.hpp"

namespace py = pybind11;

namespace forestcc::python {

namespace {

// Why a Python value is not JSON, and where: segments are collected innermost first while the
// conversion unwinds, so the successful path costs nothing.
struct NotJson {
  std::string what;
  std::vector<std::string> segments;
};

std::string pathOf(const std::vector<std::string>& segments) {
  constexpr size_t kShown = 8;  // the outermost segments locate it; a deep tail adds nothing
  std::string out;
  const size_t n = segments.size();
  for (size_t i = 0; i < n && i < kShown; ++i) {
    const std::string& s = segments[n - 1 - i];
    out += (out.empty() || s[0] == '[') ? s : "." + s;
  }
  if (n > kShown) out += "...";
  return out;
}

std::string utf8(PyObject* text) {
  Py_ssize_t size = 0;
  if (const char* data = PyUnicode_AsUTF8AndSize(text, &size)) return std::string(data, static_cast<size_t>(size));
  PyErr_Clear();  // a lone surrogate, as json.loads can produce: kept, as its UTF-8-like bytes
  py::object bytes = py::reinterpret_steal<py::object>(PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass"));
  if (!bytes) throw py::error_already_set();
  return std::string(PyBytes_AS_STRING(bytes.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(bytes.ptr())));
}

json::Value toJson(PyObject* v, int depth) {
  if (v == Py_None) return json::Value();
  if (PyBool_Check(v)) return json::Value(v == Py_True);
  if (PyLong_Check(v)) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow == 0) return json::Value(static_cast<int64_t>(i));
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(v);
      if (!PyErr_Occurred()) return json::Value(static_cast<uint64_t>(u));
      PyErr_Clear();
    }
    PyObject* text = PyObject_Str(v);  // may refuse beyond Python's digit limit
    if (text == nullptr) {
      PyErr_Clear();
      throw NotJson{"an integer too long to convert", {}};
    }
    py::object owned = py::reinterpret_steal<py::object>(text);
    return json::Value::overflowedInteger(utf8(text));
  }
  if (PyFloat_Check(v)) return json::Value(PyFloat_AS_DOUBLE(v));
  if (PyUnicode_Check(v)) return json::Value(utf8(v));
  if (depth >= json::kMaxDepth) throw NotJson{"nested deeper than " + std::to_string(json::kMaxDepth) + " levels", {}};
  if (PyList_Check(v)) {
    json::Value out = json::Value::array();
    json::Value::Array& items = out.asArray();
    const Py_ssize_t n = PyList_GET_SIZE(v);
    items.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      try {
        items.push_back(toJson(PyList_GET_ITEM(v, i), depth + 1));
      } catch (NotJson& e) {
        e.segments.push_back("[" + std::to_string(i) + "]");
        throw;
      }
    }
    return out;
  }
  if (PyDict_Check(v)) {
    json::Value out = json::Value::object();
    json::Value::Object& members = out.asObject();
    members.reserve(static_cast<size_t>(PyDict_Size(v)));
    PyObject* key;
    PyObject* item;
    Py_ssize_t position = 0;
    while (PyDict_Next(v, &position, &key, &item)) {
      if (!PyUnicode_Check(key)) {
        throw NotJson{"a member name of type " + std::string(Py_TYPE(key)->tp_name) + " (JSON names are strings)", {}};
      }
      std::string name = utf8(key);
      try {
        members.emplace_back(name, toJson(item, depth + 1));
      } catch (NotJson& e) {
        e.segments.push_back(std::move(name));
        throw;
      }
    }
    return out;
  }
  throw NotJson{"a " + std::string(Py_TYPE(v)->tp_name) + " is not a JSON value (plans hold dicts, lists, str, "
                "int, float, bool and None)", {}};
}

// JSON to Python for a whole plan at once. A 1,024-rank forest plan has millions of ops whose
// member names, op names, buffer names and chunk indices repeat: each distinct short string is
// made once (interned) and each small integer once per conversion, which keeps the plan dict at
// about a third of the memory it took with a new object per value.
class FromJson {
 public:
  py::object convert(const json::Value& v) {
    switch (v.type()) {
      case json::Type::Null: return py::none();
      case json::Type::Bool: return py::bool_(v.asBool());
      case json::Type::Int: return integer(v.asInt64());
      case json::Type::UInt: return py::reinterpret_steal<py::object>(PyLong_FromUnsignedLongLong(v.asUInt64()));
      case json::Type::Double:
        if (v.integerOverflow()) {
          PyObject* i = PyLong_FromString(v.integerText().c_str(), nullptr, 10);
          if (i == nullptr) throw py::error_already_set();
          return py::reinterpret_steal<py::object>(i);
        }
        return py::float_(v.asDouble());
      case json::Type::String: return text(v.asString());
      case json::Type::Array: {
        const json::Value::Array& items = v.asArray();
        py::list out(items.size());
        for (size_t i = 0; i < items.size(); ++i) PyList_SET_ITEM(out.ptr(), i, convert(items[i]).release().ptr());
        return std::move(out);
      }
      case json::Type::Object: {
        py::dict out;
        for (const json::Value::Member& m : v.asObject()) {
          py::object key = text(m.first);
          py::object item = convert(m.second);
          if (PyDict_SetItem(out.ptr(), key.ptr(), item.ptr()) != 0) throw py::error_already_set();
        }
        return std::move(out);
      }
    }
    return py::none();
  }

  // As convert, freeing each array item and object member of `v` once converted, and handing the
  // freed pages back every so often: the dict then grows while the tree shrinks, so loading a
  // large plan peaks at about the tree instead of the tree and the dict together (a 1,024-rank
  // all_reduce plan: several GB each).
  py::object take(json::Value& v) {
    if (v.isArray()) {
      json::Value::Array& items = v.asArray();
      py::list out(items.size());
      for (size_t i = 0; i < items.size(); ++i) {
        PyList_SET_ITEM(out.ptr(), i, take(items[i]).release().ptr());
        freed(items[i]);
      }
      return std::move(out);
    }
    if (v.isObject()) {
      py::dict out;
      for (json::Value::Member& m : v.asObject()) {
        py::object key = text(m.first);
        py::object item = take(m.second);
        if (PyDict_SetItem(out.ptr(), key.ptr(), item.ptr()) != 0) throw py::error_already_set();
        freed(m.second);
      }
      return std::move(out);
    }
    return convert(v);
  }

  explicit FromJson(size_t textBytes = 0) : textBytes_(textBytes) {}

 private:
  // Frees a converted container; every kTrimEvery of them, the freed pages go back to the system.
  void freed(json::Value& v) {
    if (!v.isArray() && !v.isObject()) return;
    v = json::Value();
    if (++freedSinceTrim_ >= kTrimEvery) {
      freedSinceTrim_ = 0;
      releaseFreedMemory(textBytes_);
    }
  }

  static constexpr size_t kTrimEvery = size_t{1} << 21;  // containers: a few hundred MB of tree
  size_t textBytes_ = 0;
  size_t freedSinceTrim_ = 0;
  static constexpr size_t kInternedChars = 32;     // names, not free text

  static py::object text(const std::string& s) {
    PyObject* out = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogatepass");
    if (out == nullptr) throw py::error_already_set();
    if (s.size() <= kInternedChars) PyUnicode_InternInPlace(&out);
    return py::reinterpret_steal<py::object>(out);
  }

  SharedInts integer{int64_t{1} << 16};  // chunk indices, channel ids, peers
};

}  // namespace

py::dict planToDict(const plan::Plan& p) {
  py::dict d;
  d["version"] = plan::kFormatVersion;
  d["name"] = p.name;
  d["collective"] = plan::name(p.collective);
  d["nranks"] = p.nranks;
  if (plan::rooted(p.collective)) d["root"] = p.root;
  d["in_place"] = p.inPlace;
  d["chunks_per_block"] = p.chunksPerBlock;
  py::dict buffers;
  buffers["input"] = p.inputChunks;
  buffers["output"] = p.outputChunks;
  buffers["scratch"] = p.scratchChunks;
  d["buffers"] = buffers;
  py::dict range;
  range["min_bytes"] = p.minBytes;
  range["max_bytes"] = p.maxBytes < 0 ? py::object(py::none()) : py::object(py::int_(p.maxBytes));
  d["size_range"] = range;
  py::dict pipeline;
  pipeline["max_slices"] = p.maxSlices;
  pipeline["min_slice_bytes"] = p.minSliceBytes;
  d["pipeline"] = pipeline;
  if (p.scratchBanks != 1) d["scratch_banks"] = p.scratchBanks;
  py::dict provenance, params;
  for (const auto& kv : p.params) params[py::str(kv.first)] = kv.second;
  provenance["generator"] = p.generator;
  provenance["params"] = params;
  provenance["topology_fingerprint"] = py::none();
  provenance["predicted_time_us"] = py::none();
  d["provenance"] = provenance;
  py::list ranks;
  OpDicts opDicts;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const plan::RankProgram& rp = p.ranks[r];
    py::dict rd;
    rd["rank"] = r;
    py::list channels;
    for (size_t c = 0; c < rp.channels.size(); ++c) {
      py::dict cd;
      cd["id"] = c;
      cd["peer"] = rp.channels[c].peer;
      cd["transport"] = plan::name(rp.channels[c].transport);
      channels.append(cd);
    }
    rd["channels"] = channels;
    py::list workers;
    for (size_t w = 0; w < rp.workers.size(); ++w) {
      py::dict wd;
      wd["id"] = w;
      py::list ops;
      for (const plan::Op& op : rp.workers[w].ops) ops.append(opDicts.op(op));
      wd["ops"] = ops;
      workers.append(wd);
    }
    rd["workers"] = workers;
    if (!rp.scratchBlocks.empty()) {
      py::list blocks;
      for (const plan::BlockSource& b : rp.scratchBlocks) {
        py::list pair;
        pair.append(b.src);
        pair.append(b.dst);
        blocks.append(pair);
      }
      rd["scratch_blocks"] = blocks;
    }
    ranks.append(rd);
  }
  d["ranks"] = ranks;
  return d;
}

json::Value pyToJson(const py::handle& value, const std::string& source) {
  try {
    return toJson(value.ptr(), 0);
  } catch (const NotJson& e) {
    const std::string path = pathOf(e.segments);
    throw plan::PlanError({source + ": " + (path.empty() ? "" : path + ": ") + e.what});
  }
}

py::object jsonToPy(const json::Value& value) { return FromJson().convert(value); }

py::object jsonToPyFreeing(json::Value& value, size_t textBytes) { return FromJson(textBytes).take(value); }

class JsonToPy::Impl : public FromJson {
 public:
  using FromJson::FromJson;
};

JsonToPy::JsonToPy(size_t textBytes) : impl_(std::make_unique<Impl>(textBytes)) {}

JsonToPy::~JsonToPy() = default;

py::object JsonToPy::take(json::Value& value) { return impl_->take(value); }

void releaseFreedMemory(size_t textBytes) {
#if defined(__GLIBC__)
  constexpr size_t kLargeText = size_t{16} << 20;  // below this the tree is a few hundred MB at most
  if (textBytes >= kLargeText) malloc_trim(0);
#else
  (void)textBytes;
#endif
}

plan::Plan dictToPlan(const py::handle& plan, const std::string& source) {
  return plan::planFromJson(pyToJson(plan, source), source);
}

}  // namespace forestcc::python
