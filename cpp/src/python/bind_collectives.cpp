// Collectives from Python: Python objects to the C++ API's arguments (arrays to pointers, counts
// and dtypes; integers, flags, plan files), the arrays of queued calls kept alive, and the call
// with the GIL released. Checks, selection and the plan cache are the C++ API's
// (forestcc/collective_api.hpp); the Python Communicator methods are thin wrappers over these.
#include <pybind11/stl.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "collectives/engine.hpp"
#include "collectives/generators.hpp"
#include "core/on_error.hpp"
#include "forestcc/collective_api.hpp"
#include "forestcc/error.hpp"
#include "python/array_view.hpp"
#include "python/module.hpp"
#include "python/plan_dict.hpp"

namespace py = pybind11;

namespace forestcc::python {

using collectives::Engine;
using collectives::TuningRule;
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

// An integer argument (a Python int or anything with __index__, such as numpy integers; not a
// bool, a float or a string), as a 64-bit value; errors name the argument.
long long integerArg(py::handle obj, const std::string& arg) {
  if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr()))
    throw py::type_error(arg + ": expected an integer, got " + std::string(py::repr(obj)) + " (" +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))) + ")");
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow) throw py::value_error(arg + ": " + std::string(py::repr(obj)) + " does not fit in 64 bits");
  return v;
}

// True/False, or a numpy bool.
bool flagArg(py::handle obj, const char* arg) {
  if (!PyBool_Check(obj.ptr())) {
    const py::handle type = py::type::handle_of(obj);
    if (py::str(type.attr("__module__")).cast<std::string>() == "numpy" &&
        py::str(type.attr("__name__")).cast<std::string>().rfind("bool", 0) == 0)
      return PyObject_IsTrue(obj.ptr()) == 1;
  }
  if (!PyBool_Check(obj.ptr()))
    throw py::type_error(std::string(arg) + ": expected True or False, got " + std::string(py::repr(obj)));
  return obj.ptr() == Py_True;
}

// Split sizes of all_to_all_v as 64-bit counts: non-negative integers (their number and sum are
// checked by the C++ API).
std::vector<uint64_t> splits(py::handle obj, const char* arg) {
  if (obj.is_none()) throw py::type_error(std::string(arg) + ": all_to_all_v needs the split sizes");
  if (!PySequence_Check(obj.ptr()) && !py::hasattr(obj, "__iter__"))
    throw py::type_error(std::string(arg) + ": expected a sequence of integers, got " +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  std::vector<uint64_t> out;
  for (auto item : py::iter(obj)) {
    const std::string which = std::string(arg) + "[" + std::to_string(out.size()) + "]";
    const long long v = integerArg(item, which);
    if (v < 0) throw py::value_error(which + ": split sizes must be >= 0, got " + std::to_string(v));
    out.push_back(static_cast<uint64_t>(v));
  }
  return out;
}

Tensor tensor(const ArrayView& v) {
  Tensor t(v.data, v.count, v.dtype);
  t.device = v.device;
  return t;
}

// The cudaStream_t of a call on GPU memory: `stream` as given (an int, a torch.cuda.Stream, a
// CuPy stream), or the current stream of the array's framework (forestcc.cuda.stream_handle).
void* streamOf(py::handle stream, py::handle array) {
  // Never destroyed: a static py::object would be released after the interpreter is gone.
  static py::object* resolve = new py::object(py::module_::import("forestcc.cuda").attr("stream_handle"));
  return reinterpret_cast<void*>((*resolve)(stream, array).cast<uintptr_t>());
}

// The C++ API as Python sees it: the API object plus what only Python holds (the arrays of
// queued calls, the resolver of plan files).
struct PyEngine {
  std::shared_ptr<Collectives> api;
  py::object resolver;  // algo (path, dict, ...) -> CompiledPlan, set by forestcc.Communicator
  py::list pending;     // PyWork of calls not yet known complete (they keep the arrays alive)

  PyEngine(std::shared_ptr<Collectives> a, py::object r) : api(std::move(a)), resolver(std::move(r)) {}
  PyEngine(PyEngine&&) = default;
  PyEngine& operator=(PyEngine&&) = delete;
  // The queued calls run (or fail) before `pending` lets their arrays go: a communicator dropped
  // with calls in flight must not run them on freed memory. (Calls on GPU memory are then
  // enqueued on their streams, whose frameworks order the arrays' reuse.) Without the GIL (they
  // may wait for peers, up to the timeout), except while the interpreter shuts down.
  ~PyEngine() {
    if (!api) return;
#if PY_VERSION_HEX >= 0x030D0000
    const bool finalizing = Py_IsFinalizing();
#else
    const bool finalizing = _Py_IsFinalizing();
#endif
    if (finalizing) {
      api->drain();
      return;
    }
    py::gil_scoped_release r;
    api->drain();
  }
};

// An asynchronous call as Python holds it: the native completion, the arrays it uses and the
// array wait() returns. Only Python owns it, so its Python references die with the GIL held.
struct PyWork {
  std::shared_ptr<Work> work;
  py::object keep;
  py::object result;
};

// `algo` as the C++ API takes it: "auto" and built-in names as they are; anything else (a plan
// file path, a plan dict) through the Python resolver, which proves plan files before their
// first run; a compiled plan as it is.
void setAlgorithm(PyEngine& pe, py::handle algo, Algorithm& out) {
  if (PyUnicode_Check(algo.ptr())) {
    if (PyUnicode_CompareWithASCIIString(algo.ptr(), "auto") == 0) return;  // the default
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(algo.ptr(), &size);
    if (!text) throw py::error_already_set();
    out.name.assign(text, static_cast<size_t>(size));
    if (collectives::isAlgorithm(out.name)) return;
  } else if (py::isinstance<CompiledPlan>(algo)) {
    out.plan = algo.cast<std::shared_ptr<CompiledPlan>>();
    return;
  }
  out.plan = pe.resolver(algo).cast<std::shared_ptr<CompiledPlan>>();
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

// One collective call: Python objects to the C++ API's request (out may be x itself: in place;
// a root-only buffer may be None away from the root), the call with the GIL released. Returns
// `result`, or a PyWork when async_op.
py::object callCollective(PyEngine& pe, Collective c, bool variable, py::handle x, py::handle out, py::handle opObj,
                          py::handle rootObj, py::handle algo, py::handle asyncObj, py::handle outSplits,
                          py::handle inSplits, py::handle result, py::handle stream) {
  refuseInsideSignalHandler("a collective call");
  // An error before the call reaches the C++ API refuses it: peers that entered it raise then.
  OnError refusal([&pe] { pe.api->refuseCall(); });
  const plan::CollectiveTraits& t = plan::traits(c);
  CallRequest req;
  req.collective = c;
  req.variable = variable;
  if (t.reduces) req.op = parseOp(opObj);
  if (t.rooted) req.root = integerArg(rootObj, "root");
  req.options.async = flagArg(asyncObj, "async_op");
  py::object keepX = py::none(), keepOut = py::none();  // a barrier has neither
  const bool shared = t.input == t.output && out.is(x);  // one array as input and output (in place)
  if (t.input != plan::Blocks::None) {
    if (t.rootOnly == plan::RootOnly::Input && x.is_none()) {
      req.x = Tensor::absent();
    } else {
      ArrayView v = viewArray(x, "x", shared);
      req.x = tensor(v);
      keepX = std::move(v.keep);
    }
  }
  if (t.output != plan::Blocks::None) {
    if (shared) {
      req.out = req.x;
    } else if (t.rootOnly == plan::RootOnly::Output && out.is_none()) {
      req.out = Tensor::absent();
    } else {
      ArrayView v = viewArray(out, "out", true);
      req.out = tensor(v);
      keepOut = std::move(v.keep);
    }
  }
  if (variable) {
    req.inSplits = splits(inSplits, "in_splits");
    req.outSplits = splits(outSplits, "out_splits");
  }
  setAlgorithm(pe, algo, req.options.algorithm);
  const bool gpu = (req.x.present && req.x.device >= 0) || (req.out.present && req.out.device >= 0);
  if (gpu) req.options.stream = streamOf(stream, req.x.present && req.x.device >= 0 ? x : out);
  else if (!stream.is_none())
    throw py::value_error("stream: given for a call on host memory (streams order calls on GPU memory only)");
  std::shared_ptr<Work> work;
  refusal.dismiss();
  {
    py::gil_scoped_release r;
    work = pe.api->call(req);
  }
  if (!work) return py::reinterpret_borrow<py::object>(result);
  return finish(pe, std::move(work), py::make_tuple(keepX, keepOut), py::reinterpret_borrow<py::object>(result));
}

// The stream of a point-to-point call: for GPU memory `stream` or the current stream of the
// framework of `gpuArray` (the first GPU array of the call); refused for host memory only.
void* p2pStream(py::handle stream, py::handle gpuArray) {
  if (gpuArray) return streamOf(stream, gpuArray);
  if (!stream.is_none())
    throw py::value_error("stream: given for a send/recv of host memory (streams order calls on GPU memory only)");
  return nullptr;
}

// One batch of sends and receives: `sends` and `recvs` are sequences of (array, peer) pairs.
py::object sendRecvBatch(PyEngine& pe, py::handle sendsObj, py::handle recvsObj, py::handle asyncObj, py::handle stream) {
  refuseInsideSignalHandler("send_recv");
  std::vector<SendMessage> sends;
  std::vector<RecvMessage> recvs;
  // An error before the batch reaches the C++ API refuses it: each message whose peer can be
  // read still takes its place (Collectives::refuseSendRecv), so peers do not match it with this
  // rank's next one. Every peer is read first, past a malformed item, then the first error raised.
  OnError refusal([&] { pe.api->refuseSendRecv(sends, recvs); });
  std::vector<py::object> sendArrays, recvArrays;
  std::exception_ptr malformed;
  auto peers = [&](py::handle list, const char* name, bool receive) {
    if (list.is_none()) return;
    if (!py::isinstance<py::sequence>(list) || py::isinstance<py::str>(list))
      throw py::type_error(std::string(name) + ": expected a sequence of (array, peer) pairs");
    py::sequence items = py::reinterpret_borrow<py::sequence>(list);
    for (size_t i = 0; i < items.size(); ++i) {
      try {
        const std::string arg = std::string(name) + "[" + std::to_string(i) + "]";
        py::object item = items[i];
        if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item) || py::len(item) != 2)
          throw py::type_error(arg + ": expected an (array, peer) pair");
        const long long peer = integerArg(item[py::int_(1)], (arg + "[1] (peer)").c_str());
        if (receive) {
          recvs.push_back(RecvMessage{peer});
          recvArrays.push_back(item[py::int_(0)]);
        } else {
          sends.push_back(SendMessage{peer});
          sendArrays.push_back(item[py::int_(0)]);
        }
      } catch (...) {
        if (!malformed) malformed = std::current_exception();
      }
    }
  };
  peers(sendsObj, "sends", false);
  peers(recvsObj, "recvs", true);
  if (malformed) std::rethrow_exception(malformed);
  const bool asyncOp = flagArg(asyncObj, "async_op");
  py::list keep;
  py::handle gpuArray;
  auto view = [&](auto& messages, const std::vector<py::object>& arrays, const char* name, bool receive) {
    for (size_t i = 0; i < messages.size(); ++i) {
      ArrayView v = viewArray(arrays[i], (std::string(name) + "[" + std::to_string(i) + "][0]").c_str(), receive);
      if (v.device >= 0 && !gpuArray) gpuArray = arrays[i];
      messages[i].data = v.data;
      messages[i].bytes = v.bytes;
      messages[i].device = v.device;
      keep.append(std::move(v.keep));
      keep.append(arrays[i]);
    }
  };
  view(sends, sendArrays, "sends", false);
  view(recvs, recvArrays, "recvs", true);
  void* s = p2pStream(stream, gpuArray);
  refusal.dismiss();  // the C++ API refuses what fails from here before any peer is told
  std::shared_ptr<Work> work;
  {
    py::gil_scoped_release r;
    work = pe.api->sendRecv(std::move(sends), std::move(recvs), asyncOp, s);
  }
  return work ? finish(pe, work, keep, py::none()) : py::none();
}

py::dict collectiveRow(Collective c) {
  const plan::CollectiveTraits& t = plan::traits(c);
  py::dict row;
  row["name"] = t.name;
  row["rooted"] = t.rooted;
  row["reduces"] = t.reduces;
  row["input"] = plan::name(t.input);
  row["output"] = plan::name(t.output);
  row["root_only"] = t.rootOnly == plan::RootOnly::Neither ? py::object(py::none()) : py::str(plan::name(t.rootOnly));
  row["in_place"] = t.inPlace;
  return row;
}

}  // namespace

void bindCollectives(py::module_& m) {
  m.def("collective_table", [] {
    py::list rows;
    for (int i = 0; i < plan::kCollectiveCount; ++i) rows.append(collectiveRow(static_cast<Collective>(i)));
    return rows;
  }, "One dict per plan collective (forestcc/plan.hpp's table): name, rooted, reduces, input and output "
     "blocks ('none', 'one' or 'per_rank': of count elements each), root_only (the buffer only the root "
     "passes: 'input', 'output' or None) and in_place (whether an in-place form exists).");

  py::class_<Work, std::shared_ptr<Work>>(m, "Work");
  py::class_<PyWork>(m, "WorkHandle")
      .def("wait", [](PyWork& w) {
        {
          py::gil_scoped_release r;
          w.work->waitInterruptibly();  // a queued call's completion is a condition Ctrl-C would not end
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
        return PyEngine(std::make_shared<Collectives>(std::move(comm)), std::move(resolver));
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
        pe.api->engine().setTuning(std::move(rules));
      })
      .def("choose", [](PyEngine& pe, const std::string& coll, uint64_t bytes, int memory, int inPlace) {
        return pe.api->engine().choose(parseCollective(coll), bytes, memory, inPlace);
      }, py::arg("collective"), py::arg("bytes"), py::arg("memory") = collectives::kAnyMemory,
         py::arg("in_place") = collectives::kAnyPlacement)
      .def("last_plan", [](PyEngine& pe, const std::string& coll) -> py::object {
        auto last = pe.api->engine().lastBuiltin(parseCollective(coll));
        if (!last) return py::none();
        return py::str(last->name);
      }, "Name of the built-in plan the last call of this collective used (None before any).")
      .def("compile", [](PyEngine& pe, const py::dict& d) {
        plan::Plan p = dictToPlan(d);
        py::gil_scoped_release r;
        return std::const_pointer_cast<CompiledPlan>(pe.api->engine().compile(p));
      })
      .def("builtin", [](PyEngine& pe, const std::string& algo, const std::string& coll, int root, bool inPlace) {
        Collective c = parseCollective(coll);
        py::gil_scoped_release r;
        return std::const_pointer_cast<CompiledPlan>(pe.api->engine().builtin(algo, c, root, inPlace));
      }, py::arg("algo"), py::arg("collective"), py::arg("root") = -1, py::arg("in_place") = false)
      // Positional arguments in the order of the Python methods (forestcc/collectives.py).
      .def("all_reduce", [none](PyEngine& pe, py::handle x, py::handle op, py::handle out, py::handle algo, py::handle a, py::handle st) {
        py::handle o = out.is_none() ? x : out;
        return callCollective(pe, Collective::AllReduce, false, x, o, op, none, algo, a, none, none, o, st);
      })
      .def("all_gather", [none](PyEngine& pe, py::handle out, py::handle x, py::handle algo, py::handle a, py::handle st) {
        return callCollective(pe, Collective::AllGather, false, x, out, none, none, algo, a, none, none, out, st);
      })
      .def("reduce_scatter", [none](PyEngine& pe, py::handle out, py::handle x, py::handle op, py::handle algo, py::handle a, py::handle st) {
        return callCollective(pe, Collective::ReduceScatter, false, x, out, op, none, algo, a, none, none, out, st);
      })
      .def("all_to_all", [none](PyEngine& pe, py::handle out, py::handle x, py::handle algo, py::handle a, py::handle st) {
        return callCollective(pe, Collective::AllToAll, false, x, out, none, none, algo, a, none, none, out, st);
      })
      .def("all_to_all_v", [none](PyEngine& pe, py::handle out, py::handle x, py::handle outSplits, py::handle inSplits,
                                  py::handle algo, py::handle a, py::handle st) {
        return callCollective(pe, Collective::AllToAll, true, x, out, none, none, algo, a, outSplits, inSplits, out, st);
      })
      .def("broadcast", [none](PyEngine& pe, py::handle x, py::handle root, py::handle algo, py::handle a, py::handle st) {
        return callCollective(pe, Collective::Broadcast, false, x, x, none, root, algo, a, none, none, x, st);
      })
      .def("reduce", [none](PyEngine& pe, py::handle x, py::handle root, py::handle op, py::handle out, py::handle algo, py::handle a, py::handle st) {
        py::handle o = out.is_none() ? x : out;
        return callCollective(pe, Collective::Reduce, false, x, o, op, root, algo, a, none, none, o, st);
      })
      .def("gather", [none](PyEngine& pe, py::handle out, py::handle x, py::handle root, py::handle algo, py::handle a, py::handle st) {
        return callCollective(pe, Collective::Gather, false, x, out, none, root, algo, a, none, none, out, st);
      })
      .def("scatter", [none](PyEngine& pe, py::handle out, py::handle x, py::handle root, py::handle algo, py::handle a, py::handle st) {
        return callCollective(pe, Collective::Scatter, false, x, out, none, root, algo, a, none, none, out, st);
      })
      .def("barrier", [none](PyEngine& pe, py::handle algo, py::handle a, py::handle st) {
        return callCollective(pe, Collective::Barrier, false, none, none, none, none, algo, a, none, none, none, st);
      })
      .def("send", [](PyEngine& pe, py::handle x, py::handle peerObj, py::handle asyncObj, py::handle stream) -> py::object {
        refuseInsideSignalHandler("send");
        const long long peer = integerArg(peerObj, "peer");
        // Refused from here (its arguments): the send still takes its place (sendRecvBatch).
        OnError refusal([&] { pe.api->refuseSendRecv({SendMessage{peer}}, {}); });
        const bool asyncOp = flagArg(asyncObj, "async_op");
        ArrayView v = viewArray(x, "x", false);
        void* s = p2pStream(stream, v.device >= 0 ? x : py::handle());
        refusal.dismiss();
        std::shared_ptr<Work> work;
        {
          py::gil_scoped_release r;
          work = pe.api->send(v.data, v.bytes, peer, asyncOp, v.device, s);
        }
        return work ? finish(pe, work, v.keep, py::none()) : py::none();
      })
      .def("recv", [](PyEngine& pe, py::handle out, py::handle peerObj, py::handle asyncObj, py::handle stream) -> py::object {
        refuseInsideSignalHandler("recv");
        const long long peer = integerArg(peerObj, "peer");
        OnError refusal([&] { pe.api->refuseSendRecv({}, {RecvMessage{peer}}); });
        const bool asyncOp = flagArg(asyncObj, "async_op");
        ArrayView v = viewArray(out, "out", true);
        void* s = p2pStream(stream, v.device >= 0 ? out : py::handle());
        refusal.dismiss();
        std::shared_ptr<Work> work;
        {
          py::gil_scoped_release r;
          work = pe.api->recv(v.data, v.bytes, peer, asyncOp, v.device, s);
        }
        return work ? finish(pe, work, v.keep, py::reinterpret_borrow<py::object>(out))
                    : py::reinterpret_borrow<py::object>(out);
      })
      .def("send_recv", [](PyEngine& pe, py::handle sends, py::handle recvs, py::handle asyncObj, py::handle stream) {
        return sendRecvBatch(pe, sends, recvs, asyncObj, stream);
      })
      .def("refuse_call", [](PyEngine& pe) { pe.api->refuseCall(); },
           "This rank will not take part in its next collective: a layer above (the torch backend) "
           "refused it for its arguments. The refusal takes the call's place, so peers that entered "
           "it raise MismatchError (schedules/README.md, \"Refused calls\").")
      .def("refuse_send_recv", [](PyEngine& pe, const std::vector<int64_t>& sendPeers, const std::vector<int64_t>& recvPeers) {
             std::vector<SendMessage> sends;
             std::vector<RecvMessage> recvs;
             for (int64_t peer : sendPeers) sends.push_back(SendMessage{peer});
             for (int64_t peer : recvPeers) recvs.push_back(RecvMessage{peer});
             pe.api->refuseSendRecv(std::move(sends), std::move(recvs));
           }, py::arg("send_peers"), py::arg("recv_peers"),
           "A send/recv batch a layer above (the torch backend) refused for its arguments: a send to "
           "each of send_peers and a receive from each of recv_peers still take their places, so "
           "the messages that would have matched them raise MismatchError on those peers "
           "(schedules/README.md, \"Refused calls\").")
      .def("drain", [](PyEngine& pe) {
        py::gil_scoped_release r;
        pe.api->drain();
      })
      .def("synchronize", [](PyEngine& pe) {
        py::gil_scoped_release r;
        pe.api->synchronize();
      }, "Block until every call on GPU memory finished on the GPU; raise the first error one hit.");
}

}  // namespace forestcc::python
