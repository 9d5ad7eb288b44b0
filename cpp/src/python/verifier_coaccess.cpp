// Which vector clock components each rank's clocks keep (python/forestcc/plan/clocks.py), in C++.
//
// The verifier reads a clock only to ask whether an earlier access to one chunk of memory is
// ordered before a new access to the same chunk. So a clock of rank r needs only the components
// that access a chunk which some component of r also accesses, or a chunk of r's own memory (for
// the check that every access to r's memory is done before r returns), and the entered marks of
// the ranks whose memory r's components access. This scans every op of a valid plan once: each
// op's chunks (buffers aliased as in plan/geometry.py) with the component that accesses them,
// then per chunk every rank concerned keeps every accessor. A 1,024-rank forest plan touches
// tens of millions of chunks: in Python that scan alone took longer than the verification.
#include <Python.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "python/module.hpp"
#include "python/plan_dict.hpp"
#include "python/verifier_kept.hpp"
#include "python/verifier_layout.hpp"

namespace py = pybind11;

namespace forestcc::python {

namespace {

using verifier::Layout;
using verifier::toInt;

PyObject* field(PyObject* dict, const char* name) {  // borrowed; nullptr when absent
  return PyDict_GetItemString(dict, name);
}

PyObject* required(PyObject* dict, const char* name) {
  PyObject* value = field(dict, name);
  if (value == nullptr) throw py::value_error(std::string("co_access: an op or rank lacks '") + name + "'");
  return value;
}

bool named(PyObject* text, const char* name) {
  return PyUnicode_Check(text) && PyUnicode_CompareWithASCIIString(text, name) == 0;
}

struct Scan {
  const Layout& layout;
  std::vector<std::pair<uint64_t, uint32_t>> touched;  // (location, component)

  void add(uint32_t comp, int64_t rank, PyObject* ref, int64_t count) {
    uint64_t first = layout.location(rank, ref);
    for (int64_t i = 0; i < count; ++i) touched.emplace_back(first + i, comp);
  }
};

}  // namespace

void bindVerifierCoAccess(py::module_& plan) {
  plan.def(
      "co_access",
      [](const py::list& ranks, const py::list& sizes, int64_t k, int alias, bool everyEntered) {
        const Layout layout(sizes, k, alias);
        const int64_t n = static_cast<int64_t>(ranks.size());
        // Components as clocks.Components numbers them: per rank its workers, then its channels;
        // then one entered mark per rank.
        std::vector<uint32_t> base(n);
        std::vector<uint32_t> workersOf(n);
        std::vector<int32_t> rankOf;
        std::vector<std::vector<int64_t>> peers(n);
        uint64_t comps = 0;
        for (int64_t r = 0; r < n; ++r) {
          PyObject* entry = ranks[r].ptr();
          PyObject* workers = required(entry, "workers");
          PyObject* channels = required(entry, "channels");
          base[r] = static_cast<uint32_t>(comps);
          workersOf[r] = static_cast<uint32_t>(PyList_GET_SIZE(workers));
          for (Py_ssize_t c = 0; c < PyList_GET_SIZE(channels); ++c) {
            peers[r].push_back(toInt(required(PyList_GET_ITEM(channels, c), "peer")));
          }
          comps += workersOf[r] + peers[r].size();
          rankOf.insert(rankOf.end(), workersOf[r] + peers[r].size(), static_cast<int32_t>(r));
        }
        const uint64_t entered = comps;
        if (comps + n >= (uint64_t{1} << 32)) throw py::value_error("co_access: too many clock components");
        Scan scan{layout, {}};
        for (int64_t r = 0; r < n; ++r) {
          PyObject* workers = required(ranks[r].ptr(), "workers");
          uint32_t lane0 = base[r] + workersOf[r];
          for (Py_ssize_t w = 0; w < PyList_GET_SIZE(workers); ++w) {
            uint32_t worker = base[r] + static_cast<uint32_t>(w);
            PyObject* opList = required(PyList_GET_ITEM(workers, w), "ops");
            for (Py_ssize_t s = 0; s < PyList_GET_SIZE(opList); ++s) {
              PyObject* op = PyList_GET_ITEM(opList, s);
              PyObject* name = required(op, "op");
              if (named(name, "signal") || named(name, "wait") || named(name, "flush")) continue;
              PyObject* countField = field(op, "n");
              int64_t count = countField == nullptr ? 1 : toInt(countField);
              PyObject* chField = field(op, "ch");
              int64_t ch = chField == nullptr ? -1 : toInt(chField);
              uint32_t lane = ch < 0 ? 0 : lane0 + static_cast<uint32_t>(ch);
              int64_t peer = ch < 0 ? r : peers[r][ch];
              if (named(name, "put") || named(name, "put_signal")) {
                scan.add(lane, r, required(op, "src"), count);
                scan.add(lane, peer, required(op, "dst"), count);
              } else if (named(name, "get")) {
                scan.add(lane, peer, required(op, "src"), count);
                scan.add(lane, r, required(op, "dst"), count);
              } else if (named(name, "copy")) {
                scan.add(worker, r, required(op, "src"), count);
                scan.add(worker, r, required(op, "dst"), count);
              } else {  // reduce, reduce_put, get_reduce: the worker reduces
                PyObject* dst = required(op, "dst");
                scan.add(worker, r, dst, count);
                PyObject* srcs = required(op, "srcs");
                for (Py_ssize_t i = 0; i < PyList_GET_SIZE(srcs); ++i) {
                  scan.add(worker, r, PyList_GET_ITEM(srcs, i), count);
                }
                if (named(name, "reduce_put")) {  // then its lane puts dst to the peer
                  scan.add(lane, r, dst, count);
                  scan.add(lane, peer, required(op, "remote"), count);
                } else if (named(name, "get_reduce")) {  // the worker reads the peer itself
                  scan.add(worker, peer, required(op, "src"), count);
                }
              }
            }
          }
        }
        auto& touched = scan.touched;
        std::sort(touched.begin(), touched.end());
        touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
        // Per chunk: the ranks concerned (its owner, every accessor's rank) keep every accessor
        // and the owner's entered mark. Packed as rank << 34 | component.
        std::vector<uint64_t> kept;
        std::vector<uint64_t> group;
        std::vector<int64_t> concerned;
        for (size_t i = 0; i < touched.size();) {
          uint64_t location = touched[i].first;
          int64_t owner = static_cast<int64_t>(location / layout.perRank);
          group.assign(1, entered + owner);
          concerned.assign(1, owner);
          for (; i < touched.size() && touched[i].first == location; ++i) {
            group.push_back(touched[i].second);
            concerned.push_back(rankOf[touched[i].second]);
          }
          std::sort(concerned.begin(), concerned.end());
          concerned.erase(std::unique(concerned.begin(), concerned.end()), concerned.end());
          for (int64_t r : concerned) {
            for (uint64_t comp : group) kept.push_back(static_cast<uint64_t>(r) << 34 | comp);
          }
        }
        const size_t scanned = touched.capacity() * sizeof(touched[0]);
        std::vector<std::pair<uint64_t, uint32_t>>().swap(touched);
        std::sort(kept.begin(), kept.end());
        kept.erase(std::unique(kept.begin(), kept.end()), kept.end());

        std::vector<std::vector<uint32_t>> byRank(n);
        size_t i = 0;
        for (int64_t r = 0; r < n; ++r) {
          std::vector<uint32_t>& mine = byRank[r];
          for (; i < kept.size() && static_cast<int64_t>(kept[i] >> 34) == r; ++i) {
            mine.push_back(static_cast<uint32_t>(kept[i] & ((uint64_t{1} << 34) - 1)));
          }
          if (everyEntered) {  // barrier and eager plans: rule 7 asks whether every rank saw every other enter
            for (int64_t q = 0; q < n; ++q) mine.push_back(static_cast<uint32_t>(entered + q));
          }
        }
        std::vector<uint64_t>().swap(kept);
        verifier::KeptComponents result(std::move(byRank));
        releaseFreedMemory(scanned);  // the scan's hundreds of MB at 1,024 ranks, back to the system
        return result;
      },
      py::arg("ranks"), py::arg("sizes"), py::arg("k"), py::arg("alias"), py::arg("every_entered") = false,
      "The clock components each rank of a valid plan keeps (plan/clocks.py), as KeptComponents: per rank "
      "the components that access a chunk some component of that rank accesses or a chunk of "
      "its own memory, with the entered marks of the ranks whose memory its components access. "
      "ranks: the plan's 'ranks'; sizes: chunks of input, output and scratch; alias: 0 out of "
      "place, 1 input is output, 2 input is block `rank` of output, 3 output is block `rank` of "
      "input; every_entered: every rank keeps every entered mark besides (barrier and eager plans).");
  py::class_<verifier::KeptComponents>(plan, "KeptComponents",
                                       "Which clock components each rank's clocks keep (co_access).")
      .def(py::init([](const std::vector<std::vector<uint32_t>>& byRank) {
             return verifier::KeptComponents(byRank);
           }),
           py::arg("by_rank"), "From the components of each rank.")
      .def("__len__", &verifier::KeptComponents::ranks)
      .def("keeps", &verifier::KeptComponents::keeps, py::arg("rank"), py::arg("comp"))
      .def(
          "components",
          [](const verifier::KeptComponents& kept, size_t rank) {
            py::set out;
            for (uint32_t comp : kept.of(rank)) out.add(py::int_(comp));
            return out;
          },
          py::arg("rank"), "The set of components rank keeps.")
      .def(
          "count", [](const verifier::KeptComponents& kept, size_t rank) { return kept.of(rank).size(); },
          py::arg("rank"), "How many components rank keeps.");
}

}  // namespace forestcc::python
