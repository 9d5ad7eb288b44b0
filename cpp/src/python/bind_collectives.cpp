// Collectives from Python: argument checks (before any rank communicates), plan choice, and the
// call itself with the GIL released. The Python Communicator methods are thin wrappers over
// Engine.collective / send / recv.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include <algorithm>

#include "collectives/engine.hpp"
#include "collectives/generators.hpp"
#include "python/array_view.hpp"
#include "python/module.hpp"
#include "python/plan_dict.hpp"
#include "transport/shm_segment.hpp"

namespace py = pybind11;

namespace forestcc::python {

using collectives::Engine;
using collectives::TuningRule;
using collectives::Work;
using executor::CompiledPlan;
using plan::Collective;

namespace {

// all_to_all_v is an all_to_all with per-peer block sizes.
constexpr const char* kAllToAllV = "all_to_all_v";

Collective parseCollective(const std::string& name) {
  Collective c;
  if (name == kAllToAllV) return Collective::AllToAll;
  if (!plan::parse(name, c)) throw py::value_error("collective: unknown collective '" + name + "'");
  return c;
}

ReduceOp parseOp(py::handle obj) {
  if (PyUnicode_Check(obj.ptr())) {
    static const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg};
    for (ReduceOp op : kOps)
      if (PyUnicode_CompareWithASCIIString(obj.ptr(), name(op)) == 0) return op;
  }
  throw py::value_error("op: unknown reduction " + std::string(py::repr(obj)) + " (expected sum, prod, min, max or avg)");
}

std::string count(size_t n) { return std::to_string(n) + (n == 1 ? " element" : " elements"); }

[[noreturn]] void sizeError(const char* arg, size_t got, size_t want, const std::string& because) {
  throw py::value_error(std::string(arg) + ": has " + count(got) + ", expected " + count(want) + " (" + because + ")");
}

void sameType(const ArrayView& a, const char* an, const ArrayView& b, const char* bn) {
  if (a.dtype != b.dtype)
    throw py::type_error(std::string(bn) + ": dtype " + name(b.dtype) + " does not match " + an + "'s " + name(a.dtype));
}

bool overlaps(const ArrayView& a, const ArrayView& b) {
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  return a.bytes && b.bytes && a0 < b0 + b.bytes && b0 < a0 + a.bytes;
}

// A rank's stand-in buffer where the collective has no user buffer (gather's output or
// scatter's input away from the root): plans may still stage data there.
// Uninitialized (new char[]): plans write before they read it, and zero-filling a large stand-in
// on every call cost more than the collective.
struct Scratch {
  std::unique_ptr<char[]> bytes;
  size_t size = 0;
};

// An integer argument (a Python int or anything with __index__, such as numpy integers; not a
// bool, a float or a string), as a 64-bit value; errors name the argument.
long long integerArg(py::handle obj, const std::string& arg) {
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr()))
    throw py::type_error(arg + ": expected an integer, got " + std::string(py::repr(obj)) + " (" +
                         std::string(py::str(obj.get_type().attr("__name__"))) + ")");
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow) throw py::value_error(arg + ": " + std::string(py::repr(obj)) + " does not fit in 64 bits");
  return v;
}

// A rank argument (root, peer): an integer in [0, n).
int rankArg(py::handle obj, const char* arg, int n) {
  const long long v = integerArg(obj, arg);
  if (v < 0 || v >= n)
    throw py::value_error(std::string(arg) + ": " + std::to_string(v) + " is out of range: must be a rank in [0, " +
                          std::to_string(n) + ")");
  return static_cast<int>(v);
}

// True/False, or a numpy bool.
bool flagArg(py::handle obj, const char* arg) {
  if (!PyBool_Check(obj.ptr())) {
    const py::handle type = obj.get_type();
    if (py::str(type.attr("__module__")).cast<std::string>() == "numpy" &&
        py::str(type.attr("__name__")).cast<std::string>().rfind("bool", 0) == 0)
      return PyObject_IsTrue(obj.ptr()) == 1;
  }
  if (!PyBool_Check(obj.ptr()))
    throw py::type_error(std::string(arg) + ": expected True or False, got " + std::string(py::repr(obj)));
  return obj.ptr() == Py_True;
}

// Split sizes of all_to_all_v: one non-negative integer per rank, whose sum (`total`) fits in 64
// bits; a sum that wrapped around would pass the size check with a wrong layout.
std::vector<uint64_t> splits(py::handle obj, const char* arg, int n, uint64_t& total) {
  if (obj.is_none()) throw py::type_error(std::string(arg) + ": all_to_all_v needs the split sizes");
  if (!PySequence_Check(obj.ptr()) && !py::hasattr(obj, "__iter__"))
    throw py::type_error(std::string(arg) + ": expected a sequence of integers, got " +
                         std::string(py::str(obj.get_type().attr("__name__"))));
  std::vector<uint64_t> out;
  total = 0;
  for (auto item : py::iter(obj)) {
    const std::string which = std::string(arg) + "[" + std::to_string(out.size()) + "]";
    const long long v = integerArg(item, which);
    if (v < 0) throw py::value_error(which + ": split sizes must be >= 0, got " + std::to_string(v));
    if (__builtin_add_overflow(total, static_cast<uint64_t>(v), &total))
      throw py::value_error(std::string(arg) + ": the split sizes add up to more than 2**64 elements");
    out.push_back(static_cast<uint64_t>(v));
  }
  if (static_cast<int>(out.size()) != n)
    throw py::value_error(std::string(arg) + ": has " + std::to_string(out.size()) + " entries, expected one per rank (" +
                          std::to_string(n) + ")");
  return out;
}

// The engine as Python sees it: the native engine plus what only Python holds (the arrays of
// queued calls, the resolver of plan files) and a cache of the last plan per collective.
struct PyEngine {
  std::shared_ptr<Engine> engine;
  py::object resolver;  // algo (path or dict) -> CompiledPlan, set by forestcc.Communicator
  py::list pending;     // PyWork of calls not yet known complete (they keep the arrays alive)
  std::shared_ptr<Scratch> standIn;  // reused by blocking calls (they run one at a time)
  struct Last {
    std::string algo;
    int root = -2;
    bool inPlace = false;
    std::shared_ptr<const CompiledPlan> plan;
  } last[plan::kCollectiveCount];
};

// An asynchronous call as Python holds it: the native completion, the arrays it uses and the
// array wait() returns. Only Python owns it, so its Python references die with the GIL held.
struct PyWork {
  std::shared_ptr<Work> work;
  py::object keep;
  py::object result;
};

// kSharedMemory when the call's buffers all lie in forestcc.empty memory (peers map them),
// else kPrivateMemory. A stand-in (gather's output, scatter's input away from the root) is not
// the user's and does not count: the root, which has both buffers, must come to the same kind.
int memoryKind(const CallBuffers& b, const void* standIn) {
  size_t offset;
  auto shared = [&](const void* p, uint64_t bytes) {
    return !bytes || p == standIn || findSharedAllocation(p, bytes, &offset) != nullptr;
  };
  return shared(b.input, b.inputBytes) && shared(b.output, b.outputBytes) ? collectives::kSharedMemory
                                                                          : collectives::kPrivateMemory;
}

std::shared_ptr<const CompiledPlan> choosePlan(PyEngine& pe, Collective c, const char* collName, bool variable,
                                               py::handle algo, int root, bool inPlace, const CallBuffers& b,
                                               const void* standIn) {
  const uint64_t bytes = std::max(b.inputBytes, b.outputBytes);
  Engine& e = *pe.engine;
  std::shared_ptr<const CompiledPlan> chosen;
  if (PyUnicode_Check(algo.ptr())) {
    static const std::string kDirect = "direct";
    std::string named;                   // holds an algorithm given by name
    const std::string* name = &kDirect;  // "auto" without a matching rule, and all_to_all_v
    if (PyUnicode_CompareWithASCIIString(algo.ptr(), "auto") == 0) {
      // all_to_all_v needs a plan without scratch (uneven blocks): direct.
      if (!variable) {
        const std::string& tuned =
            e.choose(c, bytes, e.tunedByMemory() ? memoryKind(b, standIn) : collectives::kAnyMemory,
                     inPlace ? collectives::kInPlace : collectives::kOutOfPlace);
        if (!tuned.empty()) name = &tuned;
      }
    } else {
      named = py::str(algo);
      name = &named;
      static const std::vector<std::string> builtins = collectives::algorithmNames();
      if (std::find(builtins.begin(), builtins.end(), named) == builtins.end())
        chosen = pe.resolver(algo).cast<std::shared_ptr<CompiledPlan>>();  // a plan file
    }
    if (!chosen) {
      PyEngine::Last& last = pe.last[static_cast<int>(c)];
      if (last.plan && last.algo == *name && last.root == root && last.inPlace == inPlace) return last.plan;
      const std::string algorithm = *name;  // a copy: set_tuning may run while the GIL is released
      {
        py::gil_scoped_release r;
        chosen = e.builtin(algorithm, c, plan::rooted(c) ? root : -1, inPlace);
      }
      last = {algorithm, root, inPlace, chosen};
      return chosen;
    }
  } else if (py::isinstance<CompiledPlan>(algo)) {
    chosen = algo.cast<std::shared_ptr<CompiledPlan>>();
  } else {
    chosen = pe.resolver(algo).cast<std::shared_ptr<CompiledPlan>>();
  }
  if (chosen->collective != c)
    throw py::value_error("algo: plan '" + chosen->name + "' is a " + plan::name(chosen->collective) + " plan, not " +
                          std::string(collName));
  if (chosen->inPlace != inPlace)
    throw py::value_error("algo: plan '" + chosen->name + "' is " + (chosen->inPlace ? "in place" : "out of place") +
                          " but this call is " + (inPlace ? "in place" : "out of place"));
  if (plan::rooted(c) && chosen->root != root)
    throw py::value_error("algo: plan '" + chosen->name + "' is for root " + std::to_string(chosen->root) + ", not " +
                          std::to_string(root));
  return chosen;
}

py::object finish(PyEngine& pe, std::shared_ptr<Work> work, py::object keep, py::object result) {
  // Forget calls that completed; keep this one's arrays until it completes.
  py::list still;
  for (auto item : pe.pending)
    if (!item.cast<PyWork&>().work->completed()) still.append(item);
  auto w = py::cast(PyWork{std::move(work), std::move(keep), std::move(result)});
  still.append(w);
  pe.pending = still;
  return w;
}

// Checks the arguments of one collective call (before anything is sent), picks the plan and
// runs it, or queues it when asyncOp. Returns `result`, or a PyWork.
py::object callCollective(PyEngine& pe, Collective c, bool variable, py::handle x, py::handle out, py::handle opObj,
                          py::handle rootObj, py::handle algo, py::handle asyncObj, py::handle outSplits,
                          py::handle inSplits, py::handle result) {
  refuseInsideSignalHandler("a collective call");
  Engine& e = *pe.engine;
        const char* collName = variable ? kAllToAllV : plan::name(c);
        const int n = e.size(), rank = e.rank();
        const ReduceOp op = c == Collective::AllReduce || c == Collective::ReduceScatter || c == Collective::Reduce
                                 ? parseOp(opObj) : ReduceOp::Sum;
        const int root = plan::rooted(c) ? rankArg(rootObj, "root", n) : -1;
        const bool asyncOp = flagArg(asyncObj, "async_op");
        CallBuffers b;
        b.op = op;
        bool inPlace = false;
        std::shared_ptr<Scratch> scratch;
        const void* standIn = nullptr;
        py::object keepX = py::none(), keepOut = py::none();  // a barrier has neither
        auto stage = [&](size_t bytes) {
          bytes = bytes ? bytes : 1;
          // Blocking calls share one stand-in; a queued call keeps its own (`scratch`, which
          // the queued work holds) until it ran.
          std::shared_ptr<Scratch>& slot = asyncOp ? scratch : pe.standIn;
          if (!slot || slot->size < bytes) {
            slot = std::make_shared<Scratch>();
            slot->bytes.reset(new char[bytes]);
            slot->size = bytes;
          }
          standIn = slot->bytes.get();
          return static_cast<void*>(slot->bytes.get());
        };
        switch (c) {
          case Collective::Barrier: break;
          case Collective::AllReduce: case Collective::Broadcast: case Collective::Reduce: {
            ArrayView vx = viewArray(x, "x", out.is_none() || out.is(x));
            ArrayView vo = out.is_none() || out.is(x) ? vx : viewArray(out, "out", true);
            sameType(vx, "x", vo, "out");
            if (vo.count != vx.count) sizeError("out", vo.count, vx.count, "the size of x");
            // Empty arrays are never in place: their data pointers say nothing (torch.empty(0) has
            // none), and ranks must agree on the placement, which is part of the plan.
            inPlace = vo.data == vx.data && vx.bytes;
            if (!inPlace && overlaps(vx, vo)) throw py::value_error("out: overlaps x without being the same memory");
            b = {vx.data, vx.bytes, vo.data, vo.bytes, vx.count, vx.dtype, op, {}, {}};
            keepX = vx.keep;
            keepOut = vo.keep;
            break;
          }
          case Collective::AllGather: case Collective::Gather: {
            ArrayView vx = viewArray(x, "x", false);
            const bool hasOut = c == Collective::AllGather || rank == root;
            if (hasOut) {
              ArrayView vo = viewArray(out, "out", true);
              sameType(vx, "x", vo, "out");
              if (vo.count != vx.count * n) sizeError("out", vo.count, vx.count * n, "the size of x times " + std::to_string(n) + " ranks");
              const char* mine = static_cast<const char*>(vo.data) + rank * vx.bytes;
              inPlace = c == Collective::AllGather && vx.data == mine && vx.bytes;
              if (!inPlace && overlaps(vx, vo))
                throw py::value_error(std::string("out: overlaps x") + (c == Collective::AllGather
                    ? " other than as its block for this rank (in place, x must be out's block number rank)"
                    : "; gather is out of place"));
              b = {vx.data, vx.bytes, vo.data, vo.bytes, vx.count, vx.dtype, op, {}, {}};
              keepOut = vo.keep;
            } else {
              b = {vx.data, vx.bytes, stage(vx.bytes * n), vx.bytes * n, vx.count, vx.dtype, op, {}, {}};
            }
            keepX = vx.keep;
            break;
          }
          case Collective::ReduceScatter: case Collective::Scatter: {
            ArrayView vo = viewArray(out, "out", true);
            const bool hasIn = c == Collective::ReduceScatter || rank == root;
            if (hasIn) {
              ArrayView vx = viewArray(x, "x", false);
              sameType(vx, "x", vo, "out");
              if (vx.count != vo.count * n) sizeError("x", vx.count, vo.count * n, "the size of out times " + std::to_string(n) + " ranks");
              const char* mine = static_cast<const char*>(vx.data) + rank * vo.bytes;
              inPlace = c == Collective::ReduceScatter && vo.data == mine && vo.bytes;
              if (!inPlace && overlaps(vx, vo))
                throw py::value_error(std::string("out: overlaps x") + (c == Collective::ReduceScatter
                    ? " other than as its block for this rank (in place, out must be x's block number rank)"
                    : "; scatter is out of place"));
              b = {vx.data, vx.bytes, vo.data, vo.bytes, vo.count, vo.dtype, op, {}, {}};
              keepX = vx.keep;
            } else {
              b = {stage(vo.bytes * n), vo.bytes * n, vo.data, vo.bytes, vo.count, vo.dtype, op, {}, {}};
            }
            keepOut = vo.keep;
            break;
          }
          case Collective::AllToAll: {
            ArrayView vx = viewArray(x, "x", out.is(x));
            ArrayView vo = out.is(x) ? vx : viewArray(out, "out", true);
            sameType(vx, "x", vo, "out");
            inPlace = vo.data == vx.data && vx.bytes;
            if (!inPlace && overlaps(vx, vo)) throw py::value_error("out: overlaps x without being the same memory");
            if (variable) {
              if (inPlace) throw py::value_error("out: all_to_all_v is out of place; pass an out that does not overlap x");
              uint64_t inTotal = 0, outTotal = 0;
              b.inCounts = splits(inSplits, "in_splits", n, inTotal);
              b.outCounts = splits(outSplits, "out_splits", n, outTotal);
              if (inTotal != vx.count) sizeError("x", vx.count, inTotal, "the sum of in_splits");
              if (outTotal != vo.count) sizeError("out", vo.count, outTotal, "the sum of out_splits");
              b.count = 0;
            } else {
              if (vo.count != vx.count) sizeError("out", vo.count, vx.count, "the size of x");
              if (vx.count % n)
                throw py::value_error("x: has " + count(vx.count) + ", which does not divide into " + std::to_string(n) +
                                      " equal blocks (one per rank); use all_to_all_v for uneven splits");
              b.count = vx.count / n;
            }
            b.input = vx.data;
            b.inputBytes = vx.bytes;
            b.output = vo.data;
            b.outputBytes = vo.bytes;
            b.dtype = vx.dtype;
            keepX = vx.keep;
            keepOut = vo.keep;
            break;
          }
          case Collective::SendRecv:
            throw py::value_error("collective: sendrecv is a plan collective; use send() and recv()");
        }
        std::shared_ptr<const CompiledPlan> chosen =
            choosePlan(pe, c, collName, variable, algo, root, inPlace, b, standIn);
        if (!asyncOp) {
          py::gil_scoped_release r;
          e.run(*chosen, b);
          return py::reinterpret_borrow<py::object>(result);
        }
        auto work = e.submit(chosen, b, scratch);
        return finish(pe, work, py::make_tuple(keepX, keepOut), py::reinterpret_borrow<py::object>(result));
}

}  // namespace

void bindCollectives(py::module_& m) {
  py::class_<Work, std::shared_ptr<Work>>(m, "Work");
  py::class_<PyWork>(m, "WorkHandle")
      .def("wait", [](PyWork& w) {
        {
          py::gil_scoped_release r;
          w.work->wait();
        }
        w.keep = py::none();
        return w.result;
      }, "Block until the call finished (raising its error, if any); returns its result array.")
      .def("is_completed", [](PyWork& w) { return w.work->completed(); })
      .def("__repr__", [](PyWork& w) {
        return std::string("<forestcc.Work ") + (w.work->completed() ? "completed>" : "pending>");
      });

  py::class_<CompiledPlan, std::shared_ptr<CompiledPlan>>(m, "CompiledPlan")
      .def_property_readonly("name", [](const CompiledPlan& p) { return p.name; })
      .def_property_readonly("collective", [](const CompiledPlan& p) { return std::string(plan::name(p.collective)); })
      .def_property_readonly("in_place", [](const CompiledPlan& p) { return p.inPlace; })
      .def_property_readonly("root", [](const CompiledPlan& p) { return p.root; })
      .def_property_readonly("workers", [](const CompiledPlan& p) { return p.workers.size(); });

  py::handle none = py::none();
  py::class_<PyEngine>(m, "Engine")
      .def(py::init([](std::shared_ptr<Communicator> comm, py::object resolver) {
        return PyEngine{std::make_shared<Engine>(std::move(comm)), std::move(resolver), py::list(), nullptr, {}};
      }))
      .def("set_tuning", [](PyEngine& pe, const std::vector<std::tuple<std::string, int, int, uint64_t, int64_t, std::string, int, int>>& rows) {
        std::vector<TuningRule> rules;
        for (const auto& [coll, lo, hi, minB, maxB, algo, memory, inPlace] : rows) {
          TuningRule r;
          r.collective = parseCollective(coll);
          r.minRanks = lo;
          r.maxRanks = hi;
          r.minBytes = minB;
          r.maxBytes = maxB;
          r.algorithm = algo;
          r.memory = memory;
          r.inPlace = inPlace;
          rules.push_back(r);
        }
        pe.engine->setTuning(std::move(rules));
      })
      .def("choose", [](PyEngine& pe, const std::string& coll, uint64_t bytes, int memory, int inPlace) {
        return pe.engine->choose(parseCollective(coll), bytes, memory, inPlace);
      }, py::arg("collective"), py::arg("bytes"), py::arg("memory") = collectives::kAnyMemory,
         py::arg("in_place") = collectives::kAnyPlacement)
      .def("last_plan", [](PyEngine& pe, const std::string& coll) -> py::object {
        const auto& last = pe.last[static_cast<int>(parseCollective(coll))];
        if (!last.plan) return py::none();
        return py::str(last.plan->name);
      }, "Name of the built-in plan the last call of this collective used (None before any).")
      .def("compile", [](PyEngine& pe, const py::dict& d) {
        plan::Plan p = dictToPlan(d);
        py::gil_scoped_release r;
        return std::const_pointer_cast<CompiledPlan>(pe.engine->compile(p));
      })
      .def("builtin", [](PyEngine& pe, const std::string& algo, const std::string& coll, int root, bool inPlace) {
        Collective c = parseCollective(coll);
        py::gil_scoped_release r;
        return std::const_pointer_cast<CompiledPlan>(pe.engine->builtin(algo, c, root, inPlace));
      }, py::arg("algo"), py::arg("collective"), py::arg("root") = -1, py::arg("in_place") = false)
      // Positional arguments in the order of the Python methods (forestcc/collectives.py).
      .def("all_reduce", [none](PyEngine& pe, py::handle x, py::handle op, py::handle out, py::handle algo, py::handle a) {
        return callCollective(pe, Collective::AllReduce, false, x, out, op, none, algo, a, none, none, out.is_none() ? x : out);
      })
      .def("all_gather", [none](PyEngine& pe, py::handle out, py::handle x, py::handle algo, py::handle a) {
        return callCollective(pe, Collective::AllGather, false, x, out, none, none, algo, a, none, none, out);
      })
      .def("reduce_scatter", [none](PyEngine& pe, py::handle out, py::handle x, py::handle op, py::handle algo, py::handle a) {
        return callCollective(pe, Collective::ReduceScatter, false, x, out, op, none, algo, a, none, none, out);
      })
      .def("all_to_all", [none](PyEngine& pe, py::handle out, py::handle x, py::handle algo, py::handle a) {
        return callCollective(pe, Collective::AllToAll, false, x, out, none, none, algo, a, none, none, out);
      })
      .def("all_to_all_v", [none](PyEngine& pe, py::handle out, py::handle x, py::handle outSplits, py::handle inSplits,
                                  py::handle algo, py::handle a) {
        return callCollective(pe, Collective::AllToAll, true, x, out, none, none, algo, a, outSplits, inSplits, out);
      })
      .def("broadcast", [none](PyEngine& pe, py::handle x, py::handle root, py::handle algo, py::handle a) {
        return callCollective(pe, Collective::Broadcast, false, x, none, none, root, algo, a, none, none, x);
      })
      .def("reduce", [none](PyEngine& pe, py::handle x, py::handle root, py::handle op, py::handle out, py::handle algo, py::handle a) {
        return callCollective(pe, Collective::Reduce, false, x, out, op, root, algo, a, none, none, out.is_none() ? x : out);
      })
      .def("gather", [none](PyEngine& pe, py::handle out, py::handle x, py::handle root, py::handle algo, py::handle a) {
        return callCollective(pe, Collective::Gather, false, x, out, none, root, algo, a, none, none, out);
      })
      .def("scatter", [none](PyEngine& pe, py::handle out, py::handle x, py::handle root, py::handle algo, py::handle a) {
        return callCollective(pe, Collective::Scatter, false, x, out, none, root, algo, a, none, none, out);
      })
      .def("barrier", [none](PyEngine& pe, py::handle algo, py::handle a) {
        return callCollective(pe, Collective::Barrier, false, none, none, none, none, algo, a, none, none, none);
      })
      .def("send", [](PyEngine& pe, py::handle x, py::handle peerObj, py::handle asyncObj) -> py::object {
        refuseInsideSignalHandler("send");
        const int peer = rankArg(peerObj, "peer", pe.engine->size());
        const bool asyncOp = flagArg(asyncObj, "async_op");
        ArrayView v = viewArray(x, "x", false);
        std::shared_ptr<Work> work;
        {
          py::gil_scoped_release r;
          work = pe.engine->send(v.data, v.bytes, peer, asyncOp);
        }
        return work ? finish(pe, work, v.keep, py::none()) : py::none();
      })
      .def("recv", [](PyEngine& pe, py::handle out, py::handle peerObj, py::handle asyncObj) -> py::object {
        refuseInsideSignalHandler("recv");
        const int peer = rankArg(peerObj, "peer", pe.engine->size());
        const bool asyncOp = flagArg(asyncObj, "async_op");
        ArrayView v = viewArray(out, "out", true);
        std::shared_ptr<Work> work;
        {
          py::gil_scoped_release r;
          work = pe.engine->recv(v.data, v.bytes, peer, asyncOp);
        }
        return work ? finish(pe, work, v.keep, py::reinterpret_borrow<py::object>(out))
                    : py::reinterpret_borrow<py::object>(out);
      })
      .def("drain", [](PyEngine& pe) {
        py::gil_scoped_release r;
        pe.engine->drain();
      });
}

}  // namespace forestcc::python
