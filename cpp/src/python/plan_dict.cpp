#include "python/plan_dict.hpp"

#include <string>

#include "forestcc/error.hpp"

namespace py = pybind11;

namespace forestcc::python {

namespace {

py::list refToList(const plan::ChunkRef& ref) {
  py::list l;
  l.append(plan::name(ref.buffer));
  l.append(ref.index);
  return l;
}

template <class E>
E parseEnum(const py::handle& value, const char* what) {
  E out;
  std::string text = py::str(value);
  if (!plan::parse(text, out))
    throw Error(ErrorCode::InvalidUsage, std::string("plan: unknown ") + what + " '" + text + "'");
  return out;
}

plan::ChunkRef listToRef(const py::handle& value) {
  py::sequence seq = py::reinterpret_borrow<py::sequence>(value);
  plan::ChunkRef ref;
  ref.buffer = parseEnum<plan::Buffer>(seq[0], "buffer");
  ref.index = seq[1].cast<uint32_t>();
  return ref;
}

py::dict opToDict(const plan::Op& op) {
  using plan::OpCode;
  py::dict d;
  d["op"] = plan::name(op.code);
  switch (op.code) {
    case OpCode::Signal: case OpCode::Wait: case OpCode::Flush:
      d["ch"] = op.channel;
      return d;
    case OpCode::Put: case OpCode::Get: case OpCode::PutSignal:
      d["ch"] = op.channel;
      d["src"] = refToList(op.src);
      d["dst"] = refToList(op.dst);
      break;
    case OpCode::Copy:
      d["src"] = refToList(op.src);
      d["dst"] = refToList(op.dst);
      break;
    case OpCode::Reduce: case OpCode::ReducePut: case OpCode::GetReduce: {
      if (op.code != OpCode::Reduce) d["ch"] = op.channel;
      if (op.code == OpCode::GetReduce) d["src"] = refToList(op.src);
      d["dst"] = refToList(op.dst);
      py::list srcs;
      for (int i = 0; i < op.sourceCount; ++i) srcs.append(refToList(op.sources[i]));
      d["srcs"] = srcs;
      if (op.code == OpCode::ReducePut) d["remote"] = refToList(op.remote);
      break;
    }
  }
  if (op.count != 1) d["n"] = op.count;
  return d;
}

plan::Op dictToOp(const py::dict& d) {
  using plan::OpCode;
  plan::Op op{};
  op.code = parseEnum<OpCode>(d["op"], "op");
  op.count = d.contains("n") ? d["n"].cast<uint32_t>() : 1;
  if (d.contains("ch")) op.channel = d["ch"].cast<uint16_t>();
  if (d.contains("src")) op.src = listToRef(d["src"]);
  if (d.contains("dst")) op.dst = listToRef(d["dst"]);
  if (d.contains("remote")) op.remote = listToRef(d["remote"]);
  if (d.contains("srcs")) {
    py::sequence srcs = d["srcs"];
    // get_reduce's remote source takes one of the executor's source slots.
    const size_t limit = plan::kMaxReduceSources - (op.code == OpCode::GetReduce ? 1 : 0);
    if (srcs.size() > limit)
      throw Error(ErrorCode::InvalidUsage, std::string("plan: a ") + plan::name(op.code) + " has " +
                                               std::to_string(srcs.size()) + " local sources; the executor takes at most " +
                                               std::to_string(limit) + " (chain reduces)");
    op.sourceCount = static_cast<uint8_t>(srcs.size());
    for (size_t i = 0; i < srcs.size(); ++i) op.sources[i] = listToRef(srcs[i]);
  }
  return op;
}

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
      for (const plan::Op& op : rp.workers[w].ops) ops.append(opToDict(op));
      wd["ops"] = ops;
      workers.append(wd);
    }
    rd["workers"] = workers;
    ranks.append(rd);
  }
  d["ranks"] = ranks;
  return d;
}

plan::Plan dictToPlan(const py::dict& d) {
  plan::Plan p;
  p.name = d["name"].cast<std::string>();
  p.collective = parseEnum<plan::Collective>(d["collective"], "collective");
  p.nranks = d["nranks"].cast<int>();
  if (d.contains("root") && !d["root"].is_none()) p.root = d["root"].cast<int>();
  p.inPlace = d["in_place"].cast<bool>();
  p.chunksPerBlock = d["chunks_per_block"].cast<uint32_t>();
  py::dict buffers = d["buffers"];
  p.inputChunks = buffers["input"].cast<uint64_t>();
  p.outputChunks = buffers["output"].cast<uint64_t>();
  p.scratchChunks = buffers["scratch"].cast<uint64_t>();
  py::dict range = d["size_range"];
  p.minBytes = range["min_bytes"].cast<uint64_t>();
  p.maxBytes = range["max_bytes"].is_none() ? -1 : range["max_bytes"].cast<int64_t>();
  if (d.contains("pipeline")) {
    py::dict pipeline = d["pipeline"];
    p.maxSlices = pipeline["max_slices"].cast<uint32_t>();
    p.minSliceBytes = pipeline["min_slice_bytes"].cast<uint64_t>();
  }
  if (d.contains("scratch_banks")) p.scratchBanks = d["scratch_banks"].cast<uint32_t>();
  py::dict provenance = d["provenance"];
  p.generator = provenance["generator"].cast<std::string>();
  if (provenance.contains("params"))
    for (auto kv : py::dict(provenance["params"]))
      if (py::isinstance<py::int_>(kv.second)) p.params[py::str(kv.first)] = kv.second.cast<int64_t>();
  for (auto rank : py::list(d["ranks"])) {
    py::dict rd = py::reinterpret_borrow<py::dict>(rank);
    plan::RankProgram rp;
    for (auto ch : py::list(rd["channels"])) {
      py::dict cd = py::reinterpret_borrow<py::dict>(ch);
      rp.channels.push_back({cd["peer"].cast<int>(), parseEnum<plan::Transport>(cd["transport"], "transport")});
    }
    for (auto worker : py::list(rd["workers"])) {
      py::dict wd = py::reinterpret_borrow<py::dict>(worker);
      plan::WorkerProgram wp;
      for (auto op : py::list(wd["ops"])) wp.ops.push_back(dictToOp(py::reinterpret_borrow<py::dict>(op)));
      rp.workers.push_back(std::move(wp));
    }
    p.ranks.push_back(std::move(rp));
  }
  return p;
}

}  // namespace forestcc::python
