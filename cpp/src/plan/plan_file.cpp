// Reading plan files and turning a validated document into the in-memory plan::Plan.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "plan/plan_json.hpp"

namespace forestcc::plan {

namespace {

constexpr size_t kShownErrors = 20;

std::string summary(const std::vector<std::string>& errors) {
  std::string out;
  for (size_t i = 0; i < errors.size() && i < kShownErrors; ++i) out += (i ? "\n" : "") + errors[i];
  if (errors.size() > kShownErrors) out += "\n... and " + std::to_string(errors.size() - kShownErrors) + " more errors";
  return out;
}

[[noreturn]] void refuse(const std::string& message) { throw PlanError({message}); }

// Integers of a validated document (its checks guarantee the type and range).
int64_t integer(const json::Value& obj, const char* key, int64_t absent = 0) {
  const json::Value* v = obj.find(key);
  return v == nullptr || v->isNull() ? absent : v->asInt64();
}

ChunkRef chunkRef(const json::Value& ref) {
  ChunkRef out{};
  parse(ref.asArray()[0].asString(), out.buffer);
  out.index = static_cast<uint32_t>(ref.asArray()[1].asInt64());
  return out;
}

// Where an op is, for the one refusal left after validation (built only then: loading stays linear).
struct OpPlace {
  const std::string& source;
  size_t rank, worker, step;
  std::string text() const {
    return source + ": rank " + std::to_string(rank) + ", worker " + std::to_string(worker) + ", step " +
           std::to_string(step);
  }
};

Op opOf(const json::Value& entry, const OpPlace& place) {
  Op op{};
  parse(entry.find("op")->asString(), op.code);
  op.count = static_cast<uint32_t>(integer(entry, "n", 1));
  op.channel = static_cast<uint16_t>(integer(entry, "ch"));
  if (const json::Value* r = entry.find("src")) op.src = chunkRef(*r);
  if (const json::Value* r = entry.find("dst")) op.dst = chunkRef(*r);
  if (const json::Value* r = entry.find("remote")) op.remote = chunkRef(*r);
  if (const json::Value* srcs = entry.find("srcs")) {
    // get_reduce's remote source takes one of the executor's source slots.
    const size_t limit = kMaxReduceSources - (op.code == OpCode::GetReduce ? 1 : 0);
    const size_t n = srcs->asArray().size();
    if (n > limit) {
      refuse(place.text() + " (" + name(op.code) + "): 'srcs' has " + std::to_string(n) +
             " chunk refs; the executor takes at most " + std::to_string(limit) + " (chain reduces)");
    }
    op.sourceCount = static_cast<uint8_t>(n);
    for (size_t i = 0; i < n; ++i) op.sources[i] = chunkRef(srcs->asArray()[i]);
  }
  return op;
}

}  // namespace

PlanError::PlanError(std::vector<std::string> errors)
    : Error(ErrorCode::InvalidUsage, summary(errors)), errors_(std::move(errors)) {}

std::string readPlanFile(const std::string& path, const Limits& limits) {
  // Non-blocking: opening a FIFO for reading would wait for a writer, unbounded.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) refuse(path + ": cannot read: " + std::strerror(errno));
  // Only a regular file: a FIFO, socket or terminal could make the read wait forever.
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(path + ": not a regular file (a plan is read from a file, not a FIFO, socket or device)");
  }
  std::string data;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      refuse(path + ": cannot read: " + std::strerror(err));
    }
    if (got == 0) break;
    data.append(buffer, static_cast<size_t>(got));
    if (static_cast<int64_t>(data.size()) > limits.maxFileBytes) {
      ::close(fd);
      refuse(path + ": unreadable: larger than " + std::to_string(limits.maxFileBytes) +
             " bytes (the limit of a plan file)");
    }
  }
  ::close(fd);
  return data;
}

namespace {

// A parse of plan text, its syntax errors as PlanError "<source>: not valid JSON: <line>:<col>: ...".
template <class Parse>
json::Value parsedPlan(const std::string& source, Parse&& parse) {
  try {
    return parse();
  } catch (const json::ParseError& e) {
    refuse(source + ": not valid JSON: " + std::to_string(e.line()) + ":" + std::to_string(e.column()) + ": " +
           e.reason());
  }
}

}  // namespace

json::Value parsePlanJson(std::string_view text, const std::string& source) {
  return parsedPlan(source, [&] { return json::parse(text, source); });
}

json::Value parsePlanJson(std::string_view text, const std::string& source, const json::ArrayStream& stream) {
  return parsedPlan(source, [&] { return json::parse(text, source, stream); });
}

Plan planFromJson(const json::Value& doc, const std::string& source, const Limits& limits) {
  std::vector<std::string> errors = validationErrors(doc, source, limits);
  if (!errors.empty()) throw PlanError(std::move(errors));
  Plan p;
  p.name = doc.find("name")->asString();
  parse(doc.find("collective")->asString(), p.collective);
  p.nranks = static_cast<int>(integer(doc, "nranks"));
  p.root = static_cast<int>(integer(doc, "root", -1));
  p.inPlace = doc.find("in_place")->asBool();
  p.chunksPerBlock = static_cast<uint32_t>(integer(doc, "chunks_per_block"));
  const json::Value& buffers = *doc.find("buffers");
  p.inputChunks = static_cast<uint64_t>(integer(buffers, "input"));
  p.outputChunks = static_cast<uint64_t>(integer(buffers, "output"));
  p.scratchChunks = static_cast<uint64_t>(integer(buffers, "scratch"));
  const json::Value& range = *doc.find("size_range");
  p.minBytes = static_cast<uint64_t>(integer(range, "min_bytes"));
  p.maxBytes = integer(range, "max_bytes", -1);
  if (const json::Value* pipeline = doc.find("pipeline")) {
    p.maxSlices = static_cast<uint32_t>(integer(*pipeline, "max_slices", 1));
    p.minSliceBytes = static_cast<uint64_t>(integer(*pipeline, "min_slice_bytes", 0));
  }
  p.scratchBanks = static_cast<uint32_t>(integer(doc, "scratch_banks", 1));
  const json::Value& provenance = *doc.find("provenance");
  p.generator = provenance.find("generator")->asString();
  if (const json::Value* params = provenance.find("params")) {
    for (const json::Value::Member& m : params->asObject()) {
      // informational; C++ keeps the integers (and booleans) that fit 64 bits
      if (m.second.type() == json::Type::Int) p.params[m.first] = m.second.asInt64();
      if (m.second.isBool()) p.params[m.first] = m.second.asBool();
    }
  }
  const json::Value::Array& ranks = doc.find("ranks")->asArray();
  for (size_t r = 0; r < ranks.size(); ++r) {
    RankProgram rp;
    for (const json::Value& channel : ranks[r].find("channels")->asArray()) {
      ChannelSpec spec;
      spec.peer = static_cast<int>(channel.find("peer")->asInt64());
      parse(channel.find("transport")->asString(), spec.transport);
      rp.channels.push_back(spec);
    }
    const json::Value::Array& workers = ranks[r].find("workers")->asArray();
    for (size_t w = 0; w < workers.size(); ++w) {
      WorkerProgram wp;
      const json::Value::Array& ops = workers[w].find("ops")->asArray();
      wp.ops.reserve(ops.size());
      for (size_t s = 0; s < ops.size(); ++s) {
        wp.ops.push_back(opOf(ops[s], OpPlace{source, r, w, s}));
      }
      rp.workers.push_back(std::move(wp));
    }
    if (const json::Value* blocks = ranks[r].find("scratch_blocks"))
      for (const json::Value& pair : blocks->asArray())
        rp.scratchBlocks.push_back({static_cast<int32_t>(pair.asArray()[0].asInt64()),
                                    static_cast<int32_t>(pair.asArray()[1].asInt64())});
    p.ranks.push_back(std::move(rp));
  }
  return p;
}

Plan parsePlan(const std::string& jsonText, const std::string& source, const Limits& limits) {
  return planFromJson(parsePlanJson(jsonText, source), source, limits);
}

Plan loadPlanFile(const std::string& path, const Limits& limits) {
  return parsePlan(readPlanFile(path, limits), path, limits);
}

}  // namespace forestcc::plan
