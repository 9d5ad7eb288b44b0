#include "python/plan_dict.hpp"

#include <cstdint>
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

// Limits of format v1, the same as forestcc.plan.ops.MAX_* (tests/test_plan_format.py checks
// that both loaders refuse the same values). Python validates first, with file/rank/worker/step
// messages; these checks keep a dict that skipped it from reaching the fixed-size records as a
// wrapped-around number or an opaque cast error.
constexpr int64_t kMaxRanks = int64_t(1) << 16;
constexpr int64_t kMaxChunks = int64_t(1) << 22;
constexpr int64_t kMaxSlices = 1024;
constexpr int64_t kMaxBytes = int64_t(1) << 62;
constexpr int64_t kMaxWorkers = 256;
constexpr int64_t kMaxChannels = int64_t(1) << 16;
constexpr int64_t kMaxOps = int64_t(1) << 23;

[[noreturn]] void refuse(const std::string& field, const std::string& problem) {
  throw Error(ErrorCode::InvalidUsage, "plan: '" + field + "' " + problem);
}

// The value of a field that must be there.
py::handle member(const py::handle& obj, const char* key, const std::string& field) {
  if (!PyDict_Check(obj.ptr())) refuse(field.substr(0, field.rfind('.')), "must be an object");
  PyObject* value = PyDict_GetItemString(obj.ptr(), key);
  if (value == nullptr) refuse(field, "is missing");
  return value;
}

// An integer field in [lo, hi], refused with its name otherwise (bools are not integers here).
int64_t intIn(const py::handle& value, const std::string& field, int64_t lo, int64_t hi) {
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr()))
    refuse(field, "must be an integer, got " + std::string(py::str(py::repr(value))));
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0 || v < lo || v > hi)
    refuse(field, "is " + std::string(py::str(value)) + ", outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

std::string text(const py::handle& value, const std::string& field) {
  if (!PyUnicode_Check(value.ptr())) refuse(field, "must be a string");
  return value.cast<std::string>();
}

py::list listOf(const py::handle& value, const std::string& field) {
  if (!PyList_Check(value.ptr())) refuse(field, "must be a list");
  return py::reinterpret_borrow<py::list>(value);
}

// A list of at most `limit` entries.
py::list boundedList(const py::handle& value, const std::string& field, int64_t limit) {
  py::list list = listOf(value, field);
  if (static_cast<int64_t>(list.size()) > limit)
    refuse(field, "has " + std::to_string(list.size()) + " entries; the limit is " + std::to_string(limit));
  return list;
}

// Chunk counts of the buffers, to check refs against.
struct Extents {
  uint64_t chunks[plan::kBufferCount];
};

plan::ChunkRef listToRef(const py::handle& value, uint32_t count, const Extents& extents,
                         const std::string& field) {
  if (!PyList_Check(value.ptr()) || PyList_Size(value.ptr()) != 2)
    refuse(field, "must be a chunk ref [buffer, index]");
  py::list seq = py::reinterpret_borrow<py::list>(value);
  plan::ChunkRef ref;
  ref.buffer = parseEnum<plan::Buffer>(seq[0], "buffer");
  const uint64_t size = extents.chunks[static_cast<int>(ref.buffer)];
  ref.index = static_cast<uint32_t>(intIn(seq[1], field + "[1]", 0, kMaxChunks));
  if (ref.index + uint64_t(count) > size)
    refuse(field, "chunks " + std::to_string(ref.index) + ".." + std::to_string(ref.index + uint64_t(count) - 1) +
                      " are out of range: '" + plan::name(ref.buffer) + "' has " + std::to_string(size) + " chunks");
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

plan::Op dictToOp(const py::handle& value, size_t channels, const Extents& extents, const std::string& where) {
  using plan::OpCode;
  if (!PyDict_Check(value.ptr())) refuse(where, "must be an object");
  py::dict d = py::reinterpret_borrow<py::dict>(value);
  plan::Op op{};
  op.code = parseEnum<OpCode>(member(d, "op", where + ".op"), "op");
  op.count = d.contains("n") ? static_cast<uint32_t>(intIn(d["n"], where + ".n", 1, kMaxChunks)) : 1;
  if (d.contains("ch")) {
    if (channels == 0) refuse(where + ".ch", "names a channel, but the rank has none");
    op.channel = static_cast<uint16_t>(intIn(d["ch"], where + ".ch", 0, static_cast<int64_t>(channels) - 1));
  }
  if (d.contains("src")) op.src = listToRef(d["src"], op.count, extents, where + ".src");
  if (d.contains("dst")) op.dst = listToRef(d["dst"], op.count, extents, where + ".dst");
  if (d.contains("remote")) op.remote = listToRef(d["remote"], op.count, extents, where + ".remote");
  if (d.contains("srcs")) {
    py::list srcs = listOf(d["srcs"], where + ".srcs");
    // get_reduce's remote source takes one of the executor's source slots.
    const size_t limit = plan::kMaxReduceSources - (op.code == OpCode::GetReduce ? 1 : 0);
    if (srcs.size() > limit)
      throw Error(ErrorCode::InvalidUsage, std::string("plan: a ") + plan::name(op.code) + " has " +
                                               std::to_string(srcs.size()) + " local sources; the executor takes at most " +
                                               std::to_string(limit) + " (chain reduces)");
    op.sourceCount = static_cast<uint8_t>(srcs.size());
    for (size_t i = 0; i < srcs.size(); ++i)
      op.sources[i] = listToRef(srcs[i], op.count, extents, where + ".srcs[" + std::to_string(i) + "]");
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
  p.name = text(member(d, "name", "name"), "name");
  p.collective = parseEnum<plan::Collective>(member(d, "collective", "collective"), "collective");
  p.nranks = static_cast<int>(intIn(member(d, "nranks", "nranks"), "nranks", 1, kMaxRanks));
  if (d.contains("root") && !d["root"].is_none()) p.root = static_cast<int>(intIn(d["root"], "root", 0, p.nranks - 1));
  py::handle inPlace = member(d, "in_place", "in_place");
  if (!PyBool_Check(inPlace.ptr())) refuse("in_place", "must be true or false");
  p.inPlace = inPlace.cast<bool>();
  p.chunksPerBlock = static_cast<uint32_t>(intIn(member(d, "chunks_per_block", "chunks_per_block"), "chunks_per_block", 1, kMaxChunks));
  py::handle buffers = member(d, "buffers", "buffers");
  p.inputChunks = intIn(member(buffers, "input", "buffers.input"), "buffers.input", 0, kMaxChunks);
  p.outputChunks = intIn(member(buffers, "output", "buffers.output"), "buffers.output", 0, kMaxChunks);
  p.scratchChunks = intIn(member(buffers, "scratch", "buffers.scratch"), "buffers.scratch", 0, kMaxChunks);
  Extents extents{};
  extents.chunks[static_cast<int>(plan::Buffer::Input)] = p.inputChunks;
  extents.chunks[static_cast<int>(plan::Buffer::Output)] = p.outputChunks;
  extents.chunks[static_cast<int>(plan::Buffer::Scratch)] = p.scratchChunks;
  py::handle range = member(d, "size_range", "size_range");
  p.minBytes = intIn(member(range, "min_bytes", "size_range.min_bytes"), "size_range.min_bytes", 0, kMaxBytes);
  py::handle maxBytes = member(range, "max_bytes", "size_range.max_bytes");
  p.maxBytes = maxBytes.is_none() ? -1 : intIn(maxBytes, "size_range.max_bytes", 0, kMaxBytes);
  // pipeline and its fields are optional (format defaults: 1 slice, no minimum slice size)
  if (d.contains("pipeline")) {
    py::handle pipeline = d["pipeline"];
    if (!PyDict_Check(pipeline.ptr())) refuse("pipeline", "must be an object");
    py::dict pd = py::reinterpret_borrow<py::dict>(pipeline);
    if (pd.contains("max_slices")) p.maxSlices = static_cast<uint32_t>(intIn(pd["max_slices"], "pipeline.max_slices", 1, kMaxSlices));
    if (pd.contains("min_slice_bytes")) p.minSliceBytes = intIn(pd["min_slice_bytes"], "pipeline.min_slice_bytes", 0, kMaxBytes);
  }
  if (d.contains("scratch_banks")) p.scratchBanks = static_cast<uint32_t>(intIn(d["scratch_banks"], "scratch_banks", 1, 2));
  py::handle provenance = member(d, "provenance", "provenance");
  p.generator = text(member(provenance, "generator", "provenance.generator"), "provenance.generator");
  PyObject* params = PyDict_GetItemString(provenance.ptr(), "params");  // member(): a dict
  if (params != nullptr && PyDict_Check(params)) {
    for (auto kv : py::reinterpret_borrow<py::dict>(params)) {
      // informational integers only; one that does not fit 64 bits is left out
      if (!PyLong_Check(kv.second.ptr())) continue;
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(kv.second.ptr(), &overflow);
      if (overflow == 0) p.params[py::str(kv.first)] = v;
    }
  }
  py::list ranks = listOf(member(d, "ranks", "ranks"), "ranks");
  if (static_cast<int64_t>(ranks.size()) != p.nranks)
    refuse("ranks", "has " + std::to_string(ranks.size()) + " entries for " + std::to_string(p.nranks) + " ranks");
  int64_t totalOps = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string where = "ranks[" + std::to_string(r) + "]";
    py::object rd = ranks[r];
    plan::RankProgram rp;
    py::list channels = boundedList(member(rd, "channels", where + ".channels"), where + ".channels", kMaxChannels);
    for (size_t c = 0; c < channels.size(); ++c) {
      const std::string here = where + ".channels[" + std::to_string(c) + "]";
      py::object cd = channels[c];
      const int peer = static_cast<int>(intIn(member(cd, "peer", here + ".peer"), here + ".peer", 0, p.nranks - 1));
      rp.channels.push_back({peer, parseEnum<plan::Transport>(member(cd, "transport", here + ".transport"), "transport")});
    }
    py::list workers = boundedList(member(rd, "workers", where + ".workers"), where + ".workers", kMaxWorkers);
    for (size_t w = 0; w < workers.size(); ++w) {
      const std::string here = where + ".workers[" + std::to_string(w) + "]";
      py::object wd = workers[w];
      py::list ops = listOf(member(wd, "ops", here + ".ops"), here + ".ops");
      totalOps += static_cast<int64_t>(ops.size());
      if (totalOps > kMaxOps) refuse("ranks", "hold more than " + std::to_string(kMaxOps) + " ops (the limit of a plan)");
      plan::WorkerProgram wp;
      for (size_t i = 0; i < ops.size(); ++i)
        wp.ops.push_back(dictToOp(py::object(ops[i]), rp.channels.size(), extents, here + ".ops[" + std::to_string(i) + "]"));
      rp.workers.push_back(std::move(wp));
    }
    p.ranks.push_back(std::move(rp));
  }
  return p;
}

}  // namespace forestcc::python
