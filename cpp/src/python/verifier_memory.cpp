// The plan verifier's chunk records (python/forestcc/plan/verifier.py), in C++.
//
// The verifier remembers, for every chunk of every rank's memory it has seen, the content (a
// Python object: plan/semantics.py), the last write and the reads since, each as (clock component,
// stamp, op); an access is checked against them with the accessor's vector clock (a Python dict),
// and what is not ordered is collected as a race, by (kind, op, other op). A 1,024-rank forest
// all_reduce plan has about 3 million such records: as Python objects in a dict they were 180
// bytes each and the largest part of verifying it; here a record is 56 bytes in one array, found
// through a dense index by location (or a hash map when the index would be too large), and the
// accesses of one op (a put's chunks, a reduction's sources) cost one call from Python.
//
// The rules are verifier.py's (its module docstring): a read must be ordered after the write; a
// write after the write and every read since; a read of a chunk nothing wrote is uninitialized;
// a write of the user's input (other than the part an in-place output aliases) is refused.
#include <Python.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <unordered_map>
#include <vector>

#include "python/module.hpp"
#include "python/verifier_layout.hpp"

namespace py = pybind11;

namespace forestcc::python {

namespace {

using verifier::Layout;
using verifier::toInt;

// Race kinds, as verifier.py's _RACE_KINDS lists their names.
enum RaceKind : int { kRace = 0, kUninitialized = 1, kInputWrite = 2, kEarly = 3 };

constexpr uint64_t kNoOp = std::numeric_limits<uint64_t>::max();  // "no op": Python None

// Events of `comp` a clock (dict {component: events}) has seen; 0 when absent.
int64_t seen(PyObject* clock, int32_t comp) {
  PyObject* key = PyLong_FromLong(comp);
  if (key == nullptr) throw py::error_already_set();
  PyObject* value = PyDict_GetItemWithError(clock, key);  // borrowed
  Py_DECREF(key);
  if (value == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    return 0;
  }
  return toInt(value);
}

uint32_t stampOf(int64_t stamp) {
  if (stamp < 0 || stamp > std::numeric_limits<uint32_t>::max()) throw py::value_error("verifier: stamp out of range");
  return static_cast<uint32_t>(stamp);
}

struct Access {
  int32_t comp;
  uint32_t stamp;
  uint64_t op;
};

struct Record {
  uint64_t location;
  PyObject* value = nullptr;  // owned; nullptr: no content (None)
  uint64_t writeOp = kNoOp;
  uint64_t readOp = kNoOp;
  int32_t writeComp = -1;  // -1: the initial content, ordered before everything
  uint32_t writeStamp = 0;
  int32_t readComp = -1;  // -1: no read since the write
  uint32_t readStamp = 0;
  uint32_t moreReads = 0;  // 1 + index into ChunkMemory::moreReads_, 0: none
};

class ChunkMemory {
 public:
  ChunkMemory(const py::handle& sizes, int64_t k, int alias, int64_t nranks, py::object combine)
      : layout_(sizes, k, alias), combine_(std::move(combine)) {
    if (nranks < 0 || layout_.perRank < 0 || layout_.size[0] < 0 || layout_.size[1] < 0 || layout_.size[2] < 0) {
      throw py::value_error("verifier: negative ranks or buffer sizes");
    }
    nranks_ = nranks;
    locations_ = static_cast<uint64_t>(nranks) * static_cast<uint64_t>(layout_.perRank);
    constexpr uint64_t kDenseIndexLimit = uint64_t{1} << 28;  // 1 GiB of index: a hash map beyond
    useDense_ = locations_ <= kDenseIndexLimit;
    if (useDense_) dense_.assign(locations_, 0);
  }
  ~ChunkMemory() {
    for (size_t i = 0; i < size_; ++i) Py_XDECREF(record(i).value);
  }
  ChunkMemory(const ChunkMemory&) = delete;
  ChunkMemory& operator=(const ChunkMemory&) = delete;

  size_t size() const { return size_; }

  uint64_t location(int64_t rank, const py::handle& ref) const { return layout_.location(rank, ref.ptr()); }

  // A chunk's first content (an input chunk before the collective runs).
  void init(uint64_t location, const py::handle& value) {
    Record& r = recordAt(location);
    set(r.value, value.ptr());
  }

  // Copies `count` chunks from `src` to `dst` (locations) as one op of `comp`: all reads first.
  void move(uint64_t src, uint64_t dst, int64_t count, const py::handle& clock, int32_t comp, int64_t stamp,
            uint64_t op) {
    checkCount(count);
    const uint32_t at = stampOf(stamp);
    // Owned, so an error midway (a clock that is not a dict) leaks nothing.
    std::vector<py::object> values(static_cast<size_t>(count));
    for (int64_t j = 0; j < count; ++j) {
      values[j] = py::reinterpret_borrow<py::object>(read(src + j, clock.ptr(), comp, at, op));
    }
    for (int64_t j = 0; j < count; ++j) write(dst + j, values[j].ptr(), clock.ptr(), comp, at, op);
  }

  // dst = combine(srcs) chunk by chunk (no content when a source has none).
  void reduce(uint64_t dst, const std::vector<uint64_t>& srcs, int64_t count, const py::handle& clock, int32_t comp,
              int64_t stamp, uint64_t op) {
    checkCount(count);
    for (int64_t j = 0; j < count; ++j) {
      py::list values(srcs.size());
      bool missing = false;
      for (size_t s = 0; s < srcs.size(); ++s) {
        PyObject* value = read(srcs[s] + j, clock.ptr(), comp, stampOf(stamp), op);
        missing = missing || value == nullptr;
        PyObject* item = value == nullptr ? Py_None : value;
        Py_INCREF(item);
        PyList_SET_ITEM(values.ptr(), s, item);
      }
      py::object combined = missing ? py::object(py::none()) : combine_(values);
      write(dst + j, combined.is_none() ? nullptr : combined.ptr(), clock.ptr(), comp, stampOf(stamp), op);
    }
  }

  void race(int kind, uint64_t op, uint64_t other, uint64_t location) {
    const RaceKey key{kind, op, other};
    auto [it, fresh] = raceIndex_.try_emplace(key, races_.size());
    if (fresh) races_.push_back({key, {}});
    races_[it->second].locations.push_back(location);
  }

  // [(kind, op, other op or None, [locations])] in the order first found; then forgotten.
  py::list takeRaces() {
    py::list out;
    for (const RaceEntry& e : races_) {
      out.append(py::make_tuple(e.key.kind, e.key.op, opOrNone(e.key.other), py::cast(e.locations)));
    }
    races_.clear();
    raceIndex_.clear();
    return out;
  }

  // Accesses not ordered before the end of the rank whose memory they touch: `finished` is per
  // rank its finishing clock. [(op, [locations])] in the order of the records, then of accesses.
  py::list late(const py::list& finished) const {
    if (static_cast<int64_t>(finished.size()) != nranks_) {
      throw py::value_error("verifier: late() needs one finishing clock per rank");
    }
    std::vector<std::pair<uint64_t, std::vector<uint64_t>>> found;
    std::unordered_map<uint64_t, size_t> index;
    const auto add = [&](uint64_t op, uint64_t location) {
      auto [it, fresh] = index.try_emplace(op, found.size());
      if (fresh) found.push_back({op, {}});
      found[it->second].second.push_back(location);
    };
    for (size_t i = 0; i < size_; ++i) {
      const Record& r = record(i);
      PyObject* done = PyList_GET_ITEM(finished.ptr(), static_cast<Py_ssize_t>(r.location / layout_.perRank));
      if (r.writeComp >= 0 && seen(done, r.writeComp) < r.writeStamp) add(r.writeOp, r.location);
      if (r.readComp < 0) continue;
      if (seen(done, r.readComp) < r.readStamp) add(r.readOp, r.location);
      if (r.moreReads == 0) continue;
      for (const Access& a : moreReads_[r.moreReads - 1]) {
        if (seen(done, a.comp) < a.stamp) add(a.op, r.location);
      }
    }
    py::list out;
    for (const auto& [op, locations] : found) out.append(py::make_tuple(op, py::cast(locations)));
    return out;
  }

  // The content of a location (None: none, or never touched).
  py::object value(uint64_t location) const {
    const uint32_t i = indexOf(location);
    PyObject* v = i == 0 ? nullptr : record(i - 1).value;
    return v == nullptr ? py::object(py::none()) : py::reinterpret_borrow<py::object>(v);
  }

 private:
  struct RaceKey {
    int kind;
    uint64_t op;
    uint64_t other;
    bool operator==(const RaceKey& o) const { return kind == o.kind && op == o.op && other == o.other; }
  };
  struct RaceKeyHash {
    size_t operator()(const RaceKey& k) const {
      return std::hash<uint64_t>()(k.op * 0x9E3779B97F4A7C15ull ^ k.other ^ static_cast<uint64_t>(k.kind) << 60);
    }
  };
  struct RaceEntry {
    RaceKey key;
    std::vector<uint64_t> locations;
  };

  static void checkCount(int64_t count) {
    if (count < 0) throw py::value_error("verifier: a negative chunk count");
  }

  static py::object opOrNone(uint64_t op) { return op == kNoOp ? py::object(py::none()) : py::object(py::int_(op)); }

  // Holds `value` in `slot` (nullptr and None: no content).
  static void set(PyObject*& slot, PyObject* value) {
    if (value == Py_None) value = nullptr;
    Py_XINCREF(value);
    Py_XDECREF(slot);
    slot = value;
  }

  uint32_t indexOf(uint64_t location) const {
    if (useDense_) return location < dense_.size() ? dense_[location] : 0;
    auto it = sparse_.find(location);
    return it == sparse_.end() ? 0 : it->second;
  }

  // The record of a location, made (with no content, never written) when it has none.
  Record& recordAt(uint64_t location) {
    uint32_t i = indexOf(location);
    if (i == 0) {
      // Both indexes alike: late() and write() take the rank from the location.
      if (location >= locations_) throw py::index_error("verifier: location outside the plan's memory");
      if (size_ >= std::numeric_limits<uint32_t>::max() - 1) throw py::value_error("verifier: too many chunks");
      if (size_ % kBlock == 0) blocks_.push_back(std::make_unique<Record[]>(kBlock));
      record(size_) = Record{location};
      i = static_cast<uint32_t>(++size_);
      if (useDense_) {
        dense_[location] = i;
      } else {
        sparse_.emplace(location, i);
      }
    }
    return record(i - 1);
  }

  Record& record(size_t i) { return blocks_[i / kBlock][i % kBlock]; }
  const Record& record(size_t i) const { return blocks_[i / kBlock][i % kBlock]; }

  // A read by `comp` at `stamp`: checked against the write, remembered (the latest per
  // component counts); returns the content (borrowed; nullptr: none).
  PyObject* read(uint64_t location, PyObject* clock, int32_t comp, uint32_t stamp, uint64_t op) {
    Record& r = recordAt(location);  // recorded all the same, so a later unordered write is a race too
    if (r.writeComp < 0 && r.value == nullptr) {
      race(kUninitialized, op, kNoOp, location);
    } else if (r.writeComp >= 0 && seen(clock, r.writeComp) < r.writeStamp) {
      race(kRace, op, r.writeOp, location);
    }
    if (r.readComp == comp || r.readComp < 0) {
      if (r.readStamp < stamp || r.readComp < 0) r.readComp = comp, r.readStamp = stamp, r.readOp = op;
      return r.value;
    }
    if (r.moreReads == 0) {
      if (freeMoreReads_.empty()) {
        moreReads_.emplace_back();
        r.moreReads = static_cast<uint32_t>(moreReads_.size());
      } else {
        r.moreReads = freeMoreReads_.back();
        freeMoreReads_.pop_back();
      }
      moreReads_[r.moreReads - 1].push_back(Access{comp, stamp, op});
      return r.value;
    }
    std::vector<Access>& more = moreReads_[r.moreReads - 1];
    for (Access& a : more) {
      if (a.comp == comp) {
        if (a.stamp < stamp) a.stamp = stamp, a.op = op;
        return r.value;
      }
    }
    more.push_back(Access{comp, stamp, op});
    return r.value;
  }

  void write(uint64_t location, PyObject* value, PyObject* clock, int32_t comp, uint32_t stamp, uint64_t op) {
    const bool fresh = indexOf(location) == 0;
    Record& r = recordAt(location);
    if (!fresh) {
      if (r.writeComp >= 0 && seen(clock, r.writeComp) < r.writeStamp) race(kRace, op, r.writeOp, location);
      if (r.readComp >= 0) {
        if (seen(clock, r.readComp) < r.readStamp) race(kRace, op, r.readOp, location);
        if (r.moreReads != 0) {
          for (const Access& a : moreReads_[r.moreReads - 1]) {
            if (seen(clock, a.comp) < a.stamp) race(kRace, op, a.op, location);
          }
        }
      }
    }
    const int64_t rank = static_cast<int64_t>(location / layout_.perRank);
    const int64_t index = static_cast<int64_t>(location % layout_.perRank);
    if (index < layout_.base(plan::Buffer::Output) && !writableInput(rank, index)) {
      race(kInputWrite, op, kNoOp, location);
    }
    set(r.value, value == nullptr ? Py_None : value);
    r.writeComp = comp, r.writeStamp = stamp, r.writeOp = op;
    r.readComp = -1, r.readStamp = 0, r.readOp = kNoOp;
    if (r.moreReads != 0) {
      moreReads_[r.moreReads - 1].clear();
      freeMoreReads_.push_back(r.moreReads);
      r.moreReads = 0;
    }
  }

  // In-place reduce_scatter and scatter: the output is block `rank` of the input, so that part
  // of the input is written (geometry.alias_function).
  bool writableInput(int64_t rank, int64_t index) const {
    if (layout_.alias != verifier::Alias::OutputInInput) return false;
    const int64_t first = rank * layout_.k;
    return index >= first && index < first + layout_.size[static_cast<int>(plan::Buffer::Output)];
  }

  Layout layout_;
  py::object combine_;
  int64_t nranks_ = 0;
  uint64_t locations_ = 0;  // nranks x chunks of a rank: every location is below
  bool useDense_ = true;
  std::vector<uint32_t> dense_;  // location -> 1 + record index, 0: none
  std::unordered_map<uint64_t, uint32_t> sparse_;
  // The records in the order first touched (reports follow it), in blocks: millions of them,
  // which a growing vector would hold twice while it moves them.
  static constexpr size_t kBlock = size_t{1} << 16;
  std::vector<std::unique_ptr<Record[]>> blocks_;
  size_t size_ = 0;
  std::vector<std::vector<Access>> moreReads_;  // the second and later readers of a chunk
  std::vector<uint32_t> freeMoreReads_;          // slots of moreReads_ free again (1 + index)
  std::vector<RaceEntry> races_;
  std::unordered_map<RaceKey, size_t, RaceKeyHash> raceIndex_;
};

}  // namespace

void bindVerifierMemory(py::module_& plan) {
  py::class_<ChunkMemory>(plan, "ChunkMemory",
                          "The plan verifier's chunk records (plan/verifier.py): content, last write and "
                          "reads since of every chunk seen, by location.")
      .def(py::init<const py::handle&, int64_t, int, int64_t, py::object>(), py::arg("sizes"), py::arg("k"),
           py::arg("alias"), py::arg("nranks"), py::arg("combine"),
           "sizes: chunks of input, output and scratch; alias: geometry.alias_kind; combine: the content "
           "of a reduction of a list of contents (semantics.combine).")
      .def("__len__", &ChunkMemory::size)
      .def("location", &ChunkMemory::location, py::arg("rank"), py::arg("ref"),
           "The location of chunk ref ([buffer, index], aliases resolved) of rank.")
      .def("init", &ChunkMemory::init, py::arg("location"), py::arg("value"))
      .def("move", &ChunkMemory::move, py::arg("src"), py::arg("dst"), py::arg("count"), py::arg("clock"),
           py::arg("comp"), py::arg("stamp"), py::arg("op"))
      .def("reduce", &ChunkMemory::reduce, py::arg("dst"), py::arg("srcs"), py::arg("count"), py::arg("clock"),
           py::arg("comp"), py::arg("stamp"), py::arg("op"))
      .def(
          "race",
          [](ChunkMemory& m, int kind, uint64_t op, const py::object& other, uint64_t location) {
            m.race(kind, op, other.is_none() ? kNoOp : other.cast<uint64_t>(), location);
          },
          py::arg("kind"), py::arg("op"), py::arg("other"), py::arg("location"),
          "Records an access of op to location not ordered after other (None: none).")
      .def("take_races", &ChunkMemory::takeRaces)
      .def("late", &ChunkMemory::late, py::arg("finished"))
      .def("value", &ChunkMemory::value, py::arg("location"));
}

}  // namespace forestcc::python
