// The canonical text of a plan: the layout forestcc.plan.dumps writes (keys in a fixed order, one
// channel or op per line, the rest compact), so a plan saved from C++ or from Python is the same
// file, diffs well and hashes stably. tests/test_plan_loader.py compares the two writers.
#include "forestcc/plan_file.hpp"
#include "plan/json.hpp"

namespace forestcc::plan {

namespace {

std::string ref(const ChunkRef& r) {
  return std::string("[\"") + name(r.buffer) + "\", " + std::to_string(r.index) + "]";
}

// One op with its fields in canonical order ("op", "ch", "src", "dst", "srcs", "remote", "n";
// the default n = 1 left out).
std::string opText(const Op& op) {
  const bool channel = op.code != OpCode::Copy && op.code != OpCode::Reduce;
  const bool src = op.code == OpCode::Put || op.code == OpCode::Get || op.code == OpCode::PutSignal ||
                   op.code == OpCode::Copy || op.code == OpCode::GetReduce;
  const bool moves = op.code != OpCode::Signal && op.code != OpCode::Wait && op.code != OpCode::Flush;
  const bool srcs = op.code == OpCode::Reduce || op.code == OpCode::ReducePut || op.code == OpCode::GetReduce;
  std::string out = std::string("{\"op\": \"") + name(op.code) + "\"";
  if (channel) out += ", \"ch\": " + std::to_string(op.channel);
  if (src) out += ", \"src\": " + ref(op.src);
  if (moves) out += ", \"dst\": " + ref(op.dst);
  if (srcs) {
    out += ", \"srcs\": [";
    for (int i = 0; i < op.sourceCount; ++i) out += (i ? ", " : "") + ref(op.sources[i]);
    out += "]";
  }
  if (op.code == OpCode::ReducePut) out += ", \"remote\": " + ref(op.remote);
  if (moves && op.count != 1) out += ", \"n\": " + std::to_string(op.count);
  return out + "}";
}

}  // namespace

std::string toJson(const Plan& p) {
  std::string out = "{\n";
  out += "  \"version\": " + std::to_string(kFormatVersion) + ",\n";
  out += "  \"name\": " + json::quote(p.name) + ",\n";
  out += std::string("  \"collective\": \"") + name(p.collective) + "\",\n";
  out += "  \"nranks\": " + std::to_string(p.nranks) + ",\n";
  if (rooted(p.collective)) out += "  \"root\": " + std::to_string(p.root) + ",\n";
  out += std::string("  \"in_place\": ") + (p.inPlace ? "true" : "false") + ",\n";
  out += "  \"chunks_per_block\": " + std::to_string(p.chunksPerBlock) + ",\n";
  out += "  \"buffers\": {\"input\": " + std::to_string(p.inputChunks) + ", \"output\": " +
         std::to_string(p.outputChunks) + ", \"scratch\": " + std::to_string(p.scratchChunks) + "},\n";
  out += "  \"size_range\": {\"min_bytes\": " + std::to_string(p.minBytes) + ", \"max_bytes\": " +
         (p.maxBytes < 0 ? std::string("null") : std::to_string(p.maxBytes)) + "},\n";
  out += "  \"pipeline\": {\"max_slices\": " + std::to_string(p.maxSlices) + ", \"min_slice_bytes\": " +
         std::to_string(p.minSliceBytes) + "},\n";
  if (p.scratchBanks != 1) out += "  \"scratch_banks\": " + std::to_string(p.scratchBanks) + ",\n";
  std::string params;
  for (const auto& [key, value] : p.params) {  // a std::map: sorted, as dumps sorts free-form params
    params += (params.empty() ? "" : ", ") + json::quote(key) + ": " + std::to_string(value);
  }
  out += "  \"provenance\": {\"generator\": " + json::quote(p.generator) + ", \"params\": {" + params +
         "}, \"topology_fingerprint\": null, \"predicted_time_us\": null},\n";
  out += "  \"ranks\": [\n";
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const RankProgram& rp = p.ranks[r];
    out += "    {\"rank\": " + std::to_string(r) + ", \"channels\": [\n";
    for (size_t c = 0; c < rp.channels.size(); ++c) {
      out += "      {\"id\": " + std::to_string(c) + ", \"peer\": " + std::to_string(rp.channels[c].peer) +
             ", \"transport\": \"" + name(rp.channels[c].transport) + "\"}" +
             (c + 1 < rp.channels.size() ? ",\n" : "\n");
    }
    out += "    ], \"workers\": [\n";
    for (size_t w = 0; w < rp.workers.size(); ++w) {
      const std::vector<Op>& ops = rp.workers[w].ops;
      out += "      {\"id\": " + std::to_string(w) + ", \"ops\": [";
      if (!ops.empty()) {
        out += "\n";
        for (size_t s = 0; s < ops.size(); ++s) out += "        " + opText(ops[s]) + (s + 1 < ops.size() ? ",\n" : "\n");
        out += "      ";
      }
      out += std::string("]}") + (w + 1 < rp.workers.size() ? ",\n" : "\n");
    }
    out += "    ]";
    if (!rp.scratchBlocks.empty()) {
      out += ", \"scratch_blocks\": [";
      for (size_t t = 0; t < rp.scratchBlocks.size(); ++t)
        out += (t ? ", [" : "[") + std::to_string(rp.scratchBlocks[t].src) + ", " +
               std::to_string(rp.scratchBlocks[t].dst) + "]";
      out += "]";
    }
    out += std::string("}") + (r + 1 < p.ranks.size() ? ",\n" : "\n");
  }
  out += "  ]\n}\n";
  return out;
}

}  // namespace forestcc::plan
