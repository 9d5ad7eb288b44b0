// Structural validation of a format-v1 plan document: the one validator behind every loader
// (C++, the NCCL shim, Python's forestcc.plan.validate and load). Every message names the file
// and, where it applies, the rank, worker, step (op index) with its op, the field and the value.
// The checks and their order follow schedules/README.md ("Errors"); a header with errors stops
// the rank programs from being checked (their checks need a sound header).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "plan/plan_json.hpp"

namespace forestcc::plan {

namespace {

using json::Type;
using json::Value;

// ---- field names and values, shown as the format's users write them ---------------------------

// 'text' as a quoted name in messages (Python's repr of a str, so messages read the same from
// every loader): single quotes unless the text has one and no double quote.
std::string repr(const std::string& text) {
  const char quote = text.find('\'') != std::string::npos && text.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + quote;
}

// A value in a message: strings quoted as names, anything else as JSON, cut to 60 characters.
std::string show(const Value* value) {
  std::string text;
  if (value == nullptr || value->isNull()) {
    text = "null";
  } else if (value->isString()) {
    text = repr(value->asString());
  } else {
    try {
      text = json::dump(*value);
    } catch (const Error&) {  // NaN or an infinity from a Python dict: not JSON
      text = std::to_string(value->asDouble());
    }
  }
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}
std::string show(const Value& value) { return show(&value); }

// ---- integers of any size: JSON has no limit, the format has ------------------------------------

bool isInt(const Value* v) { return v != nullptr && (v->isInteger() || v->integerOverflow()); }

// Sign of (v - bound) for an integer value.
int compare(const Value& v, int64_t bound) {
  if (v.integerOverflow()) return v.integerText()[0] == '-' ? -1 : 1;
  if (v.type() == Type::UInt) return 1;
  const int64_t i = v.asInt64();
  return i < bound ? -1 : i > bound ? 1 : 0;
}

// Decimal text of a non-negative integer value plus `add`.
std::string plus(const Value& v, uint64_t add) {
  if (!v.integerOverflow()) {
    const unsigned __int128 sum = static_cast<unsigned __int128>(v.asUInt64()) + add;
    if (sum <= UINT64_MAX) return std::to_string(static_cast<uint64_t>(sum));
  }
  std::string digits = v.integerOverflow() ? v.integerText() : std::to_string(v.asUInt64());
  for (size_t i = digits.size(); i-- > 0 && add;) {
    const uint64_t d = static_cast<uint64_t>(digits[i] - '0') + add % 10;
    add /= 10;
    digits[i] = static_cast<char>('0' + d % 10);
    add += d / 10;
  }
  return add ? std::to_string(add) + digits : digits;
}

// A non-negative integer value modulo k.
uint64_t modulo(const Value& v, uint64_t k) {
  if (!v.integerOverflow()) return v.asUInt64() % k;
  uint64_t r = 0;
  for (char c : v.integerText()) r = static_cast<uint64_t>((static_cast<unsigned __int128>(r) * 10 + uint64_t(c - '0')) % k);
  return r;
}

// ---- the names of format v1 ----------------------------------------------------------------------

template <class E, int N>
std::string joinedNames() {
  std::string out;
  for (int i = 0; i < N; ++i) out += std::string(i ? ", " : "") + name(static_cast<E>(i));
  return out;
}

// Fields of each op besides "op", in canonical order; "n" is optional, the others required.
const std::vector<std::string>& opFields(OpCode code) {
  static const std::map<OpCode, std::vector<std::string>> fields = {
      {OpCode::Put, {"ch", "src", "dst", "n"}},
      {OpCode::Get, {"ch", "src", "dst", "n"}},
      {OpCode::Signal, {"ch"}},
      {OpCode::Wait, {"ch"}},
      {OpCode::Flush, {"ch"}},
      {OpCode::Copy, {"src", "dst", "n"}},
      {OpCode::Reduce, {"dst", "srcs", "n"}},
      {OpCode::ReducePut, {"dst", "srcs", "ch", "remote", "n"}},
      {OpCode::PutSignal, {"ch", "src", "dst", "n"}},
      {OpCode::GetReduce, {"ch", "src", "dst", "srcs", "n"}},
  };
  return fields.at(code);
}

const std::vector<std::string> kTopLevelKeys = {
    "version", "name", "collective", "nranks", "root", "in_place", "chunks_per_block",
    "buffers", "size_range", "pipeline", "scratch_banks", "provenance", "ranks"};
const std::set<std::string> kOptionalTopLevelKeys = {"root", "pipeline", "scratch_banks"};
const std::vector<std::string> kBufferKeys = {"input", "output", "scratch"};
const std::vector<std::string> kSizeRangeKeys = {"min_bytes", "max_bytes"};
const std::vector<std::string> kPipelineKeys = {"max_slices", "min_slice_bytes"};
const std::vector<std::string> kProvenanceKeys = {"generator", "params", "topology_fingerprint", "predicted_time_us"};
const std::vector<std::string> kRankKeys = {"rank", "channels", "workers", "scratch_blocks"};
const std::vector<std::string> kRequiredRankKeys = {"rank", "channels", "workers"};
const std::vector<std::string> kChannelKeys = {"id", "peer", "transport"};
const std::vector<std::string> kWorkerKeys = {"id", "ops"};
const char* const kRefFields[] = {"src", "dst", "remote"};

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// ---- the checker ---------------------------------------------------------------------------------

class Checker {
 public:
  Checker(const std::string& source, const Limits& limits) : source_(source), limits_(limits) {}
  std::vector<std::string> errors;

  void error(const std::string& where, const std::string& message) {
    if (errors.size() < kMaxErrors) errors.push_back(source_ + ": " + (where.empty() ? "" : where + ": ") + message);
  }

  // A field whose value is not what the format wants.
  void bad(const std::string& where, const std::string& key, const Value* value, const std::string& wanted) {
    error(where, repr(key) + " must be " + wanted + ", got " + show(value));
  }

  // An integer field in [minimum, maximum]; a present null passes when nullable.
  bool intField(const Value& obj, const std::string& key, const std::string& where, int64_t minimum,
                bool nullable = false, int64_t maximum = -1) {
    const Value* value = obj.find(key);
    if (value != nullptr && value->isNull() && nullable) return true;
    if (!isInt(value) || compare(*value, minimum) < 0) {
      error(where, repr(key) + " must be an integer >= " + std::to_string(minimum) + ", got " + show(value));
      return false;
    }
    if (maximum >= 0 && compare(*value, maximum) > 0) {
      error(where, repr(key) + " is " + show(value) + ", above the limit of " + std::to_string(maximum));
      return false;
    }
    return true;
  }

  void keys(const Value& obj, const std::vector<std::string>& allowed, const std::vector<std::string>& required,
            const std::string& where) {
    for (const Value::Member& m : obj.asObject()) {
      if (!contains(allowed, m.first)) error(where, "unknown field " + repr(m.first));
    }
    for (const std::string& key : required) {
      if (obj.find(key) == nullptr) error(where, "missing field " + repr(key));
    }
  }

  void plan(const Value& plan);
  // plan() in steps, for a plan whose ranks come one by one (RankByRankValidator): the members
  // but the ranks (false: errors, so its ranks are not checked), then each rank entry (false:
  // the plan's op limit is passed, so no more are checked), then what spans ranks.
  bool header(const Value& plan);
  void ranksBegin(const Value& plan);
  bool rank(const Value& entry, size_t position);
  void ranksEnd();
  int64_t nranks() const { return nranks_; }
  // The error of a rank list that is not a list of nranks entries (`got` says what it is).
  void rankCount(int64_t nranks, const std::string& got) {
    error("", "'ranks' must be a list of " + std::to_string(nranks) + " entries (one per rank), got " + got);
  }

 private:
  static constexpr size_t kMaxErrors = 200;
  const std::string& source_;
  const Limits& limits_;
  // The sizes op refs are checked against, from the header.
  uint64_t bufferChunks_[kBufferCount] = {};
  uint64_t chunksPerBlock_ = 1;
  // (rank, peer) -> channels from rank to peer, for the pairing check.
  std::map<std::pair<int64_t, int64_t>, int64_t> channelCounts_;
  int64_t nranks_ = 0;
  int64_t totalOps_ = 0;

  void buffers(const Value& plan, bool headerOk);
  void sizeRange(const Value* range);
  void pipeline(const Value* pipeline);
  void provenance(const Value* provenance);
  void ranks(const Value& plan);
  std::vector<int64_t> channels(const Value::Array& list, int64_t rank, int64_t nranks, const std::string& where);
  void workers(const Value::Array& list, int64_t rank, size_t channelCount, const std::string& where);
  void scratchBlocks(const Value& list, int64_t nranks, const std::string& where);
  int64_t op(const Value& op, int64_t rank, size_t channelCount, const std::string& where);
  void ref(const Value& ref, uint64_t count, const std::string& where, const std::string& field);
  void parts(const Value& op, const std::string& where);
};

void Checker::plan(const Value& plan) {
  if (header(plan)) ranks(plan);  // the rank programs are only checked against a sound header
}

bool Checker::header(const Value& plan) {
  if (!plan.isObject()) {
    error("", std::string("a plan must be a JSON object, got ") + plan.typeName());
    return false;
  }
  const Value* version = plan.find("version");
  if (version == nullptr || version->type() != Type::Int || version->asInt64() != kFormatVersion) {
    error("", "unsupported plan version " + show(version) + " (this forestcc reads version " +
                  std::to_string(kFormatVersion) + ")");
    return false;
  }
  std::vector<std::string> required;
  for (const std::string& key : kTopLevelKeys) {
    if (!kOptionalTopLevelKeys.count(key)) required.push_back(key);
  }
  keys(plan, kTopLevelKeys, required, "");
  const Value* nameValue = plan.find("name");
  if (nameValue == nullptr || !nameValue->isString()) error("", "'name' must be a string, got " + show(nameValue));
  const Value* collectiveValue = plan.find("collective");
  Collective collective{};
  const bool collectiveOk = collectiveValue != nullptr && collectiveValue->isString() &&
                            parse(collectiveValue->asString(), collective);
  if (!collectiveOk) {
    error("", "'collective' " + show(collectiveValue) + " is not one of " +
                  joinedNames<Collective, kCollectiveCount>());
  }
  const Value* inPlace = plan.find("in_place");
  if (inPlace == nullptr || !inPlace->isBool()) error("", "'in_place' must be true or false, got " + show(inPlace));
  bool sizesOk = intField(plan, "nranks", "", 1, false, limits_.maxRanks);
  sizesOk = intField(plan, "chunks_per_block", "", 1, false, limits_.maxChunks) && sizesOk;
  if (collectiveOk && rooted(collective)) {
    if (intField(plan, "root", "", 0) && sizesOk && compare(*plan.find("root"), plan.find("nranks")->asInt64()) >= 0) {
      error("", "'root' " + show(plan.find("root")) + " is not a rank (nranks is " + show(plan.find("nranks")) + ")");
    }
  } else if (plan.find("root") != nullptr && collectiveOk) {
    error("", std::string("'root' is only allowed for rooted collectives, not ") + name(collective));
  }
  buffers(plan, sizesOk && collectiveOk);
  sizeRange(plan.find("size_range"));
  pipeline(plan.find("pipeline"));
  const Value* banks = plan.find("scratch_banks");
  if (banks != nullptr && !(banks->type() == Type::Int && (banks->asInt64() == 1 || banks->asInt64() == 2))) {
    error("", "'scratch_banks' must be 1 or 2, got " + show(banks));
  }
  provenance(plan.find("provenance"));
  return errors.empty();
}

void Checker::buffers(const Value& plan, bool headerOk) {
  const Value* buffers = plan.find("buffers");
  if (buffers == nullptr || !buffers->isObject()) {
    error("", "'buffers' must be an object, got " + show(buffers));
    return;
  }
  keys(*buffers, kBufferKeys, kBufferKeys, "buffers");
  bool ok = true;
  for (const std::string& key : kBufferKeys) {
    if (buffers->find(key) != nullptr) ok = intField(*buffers, key, "buffers", 0, false, limits_.maxChunks) && ok;
  }
  if (!headerOk || !ok) return;
  Collective collective{};
  parse(plan.find("collective")->asString(), collective);
  const int64_t nranks = plan.find("nranks")->asInt64();
  const int64_t k = plan.find("chunks_per_block")->asInt64();
  const int64_t expected[] = {int64_t(inputBlocks(collective, static_cast<int>(nranks))) * k,
                              int64_t(outputBlocks(collective, static_cast<int>(nranks))) * k};
  for (int i = 0; i < 2; ++i) {
    const Value* chunks = buffers->find(kBufferKeys[i]);
    if (chunks != nullptr && chunks->asInt64() != expected[i]) {
      error("buffers", repr(kBufferKeys[i]) + " is " + show(chunks) + " chunks but " + name(collective) + " over " +
                           std::to_string(nranks) + " ranks with " + std::to_string(k) + " chunks per block needs " +
                           std::to_string(expected[i]));
    }
  }
}

void Checker::sizeRange(const Value* range) {
  if (range == nullptr || !range->isObject()) {
    error("", "'size_range' must be an object, got " + show(range));
    return;
  }
  keys(*range, kSizeRangeKeys, kSizeRangeKeys, "size_range");
  if (intField(*range, "min_bytes", "size_range", 0, false, limits_.maxBytes) &&
      intField(*range, "max_bytes", "size_range", 0, true, limits_.maxBytes) && !range->find("max_bytes")->isNull() &&
      range->find("max_bytes")->asInt64() < range->find("min_bytes")->asInt64()) {
    error("size_range", "'max_bytes' " + show(range->find("max_bytes")) + " is below 'min_bytes' " +
                            show(range->find("min_bytes")));
  }
}

void Checker::pipeline(const Value* pipeline) {
  if (pipeline == nullptr) return;  // the default: one slice, no minimum slice size
  if (!pipeline->isObject()) {
    error("", "'pipeline' must be an object, got " + show(pipeline));
    return;
  }
  keys(*pipeline, kPipelineKeys, {}, "pipeline");
  if (pipeline->find("max_slices")) intField(*pipeline, "max_slices", "pipeline", 1, false, limits_.maxSlices);
  if (pipeline->find("min_slice_bytes")) intField(*pipeline, "min_slice_bytes", "pipeline", 0, false, limits_.maxBytes);
}

void Checker::provenance(const Value* provenance) {
  if (provenance == nullptr || !provenance->isObject()) {
    error("", "'provenance' must be an object, got " + show(provenance));
    return;
  }
  keys(*provenance, kProvenanceKeys, {"generator"}, "provenance");
  const Value* generator = provenance->find("generator");
  if (generator == nullptr || !generator->isString()) bad("provenance", "generator", generator, "a string");
  const Value* params = provenance->find("params");
  if (params != nullptr && !params->isObject()) bad("provenance", "params", params, "an object");
  const Value* fingerprint = provenance->find("topology_fingerprint");
  if (fingerprint != nullptr && !fingerprint->isNull() && !fingerprint->isString()) {
    bad("provenance", "topology_fingerprint", fingerprint, "a string or null");
  }
  const Value* predicted = provenance->find("predicted_time_us");
  if (predicted != nullptr && !predicted->isNull() &&
      (!predicted->isNumber() || !(predicted->asDouble() >= 0) || !std::isfinite(predicted->asDouble()))) {
    bad("provenance", "predicted_time_us", predicted, "a number >= 0 or null");
  }
}

void Checker::ranks(const Value& plan) {
  const int64_t nranks = plan.find("nranks")->asInt64();
  const Value* ranks = plan.find("ranks");
  if (ranks == nullptr || !ranks->isArray() || static_cast<int64_t>(ranks->asArray().size()) != nranks) {
    rankCount(nranks, ranks != nullptr && ranks->isArray() ? std::to_string(ranks->asArray().size()) + " entries"
                                                           : show(ranks));
    return;
  }
  ranksBegin(plan);
  for (size_t position = 0; position < ranks->asArray().size(); ++position) {
    if (!rank(ranks->asArray()[position], position)) return;
  }
  ranksEnd();
}

void Checker::ranksBegin(const Value& plan) {
  nranks_ = plan.find("nranks")->asInt64();
  const Value& buffers = *plan.find("buffers");
  for (int b = 0; b < kBufferCount; ++b) bufferChunks_[b] = buffers.find(kBufferKeys[b])->asUInt64();
  chunksPerBlock_ = plan.find("chunks_per_block")->asUInt64();
}

bool Checker::rank(const Value& entry, size_t position) {
  const int64_t nranks = nranks_;
  const int64_t rank = static_cast<int64_t>(position);
  std::string where = "ranks[" + std::to_string(position) + "]";
  if (!entry.isObject()) {
    error(where, "must be an object, got " + show(entry));
    return true;
  }
  keys(entry, kRankKeys, kRequiredRankKeys, where);
  const Value* rankValue = entry.find("rank");
  if (rankValue == nullptr || rankValue->type() != Type::Int || rankValue->asInt64() != rank) {
    bad(where, "rank", rankValue, std::to_string(position) + " (ranks are listed in order)");
    return true;
  }
  where = "rank " + std::to_string(position);
  const Value* channelList = entry.find("channels");
  const Value* workerList = entry.find("workers");
  if (channelList == nullptr || workerList == nullptr || !channelList->isArray() || !workerList->isArray()) {
    error(where, "'channels' and 'workers' must be lists");
    return true;
  }
  const auto channelCount = static_cast<int64_t>(channelList->asArray().size());
  const auto workerCount = static_cast<int64_t>(workerList->asArray().size());
  if (channelCount > limits_.maxChannels || workerCount > limits_.maxWorkers) {
    error(where, "has " + std::to_string(channelCount) + " channels and " + std::to_string(workerCount) +
                     " workers; the limits are " + std::to_string(limits_.maxChannels) + " channels and " +
                     std::to_string(limits_.maxWorkers) + " workers per rank");
    return true;
  }
  for (const Value& worker : workerList->asArray()) {
    const Value* ops = worker.find("ops");
    if (ops != nullptr && ops->isArray()) totalOps_ += static_cast<int64_t>(ops->asArray().size());
  }
  if (totalOps_ > limits_.maxOps) {
    error("", "has more than " + std::to_string(limits_.maxOps) + " ops (the limit of a plan) by rank " +
                  std::to_string(position));
    return false;
  }
  channels(channelList->asArray(), rank, nranks, where);
  workers(workerList->asArray(), rank, channelList->asArray().size(), where);
  if (const Value* blocks = entry.find("scratch_blocks")) scratchBlocks(*blocks, nranks, where);
  return true;
}

void Checker::ranksEnd() {
  for (const auto& [pair, count] : channelCounts_) {
    const auto [rank, peer] = pair;
    const auto back = channelCounts_.find({peer, rank});
    const int64_t backCount = back == channelCounts_.end() ? 0 : back->second;
    const std::string r = std::to_string(rank), p = std::to_string(peer);
    if (count > limits_.maxChannelsPerPeer) {
      error("rank " + r, "has " + std::to_string(count) + " " + (rank == peer ? "loopback channels" : "channels to rank " + p) +
                             "; the executor takes at most " + std::to_string(limits_.maxChannelsPerPeer) + " per peer");
    }
    if (rank == peer && count % 2) {
      error("", "rank " + r + " has " + std::to_string(count) +
                    " loopback channel(s); loopback channels pair up in id order, so their number must be even");
    } else if (rank != peer && backCount != count && (rank < peer || backCount == 0)) {
      error("", "rank " + r + " has " + std::to_string(count) + " channel(s) to rank " + p + " but rank " + p + " has " +
                    std::to_string(backCount) + " to rank " + r + "; the i-th channel each way pair up");
    }
  }
}

// scratch_blocks: one [src, dst] pair of ranks per scratch block, no more blocks than the scratch has.
void Checker::scratchBlocks(const Value& list, int64_t nranks, const std::string& where) {
  const uint64_t k = std::max<uint64_t>(1, chunksPerBlock_);
  const uint64_t blocks = (bufferChunks_[2] + k - 1) / k;
  if (!list.isArray() || list.asArray().size() > blocks) {
    error(where, "'scratch_blocks' must be a list of at most " + std::to_string(blocks) +
                     " [src, dst] pairs (one per scratch block), got " +
                     (list.isArray() ? std::to_string(list.asArray().size()) + " entries" : show(list)));
    return;
  }
  for (size_t t = 0; t < list.asArray().size(); ++t) {
    const Value& pair = list.asArray()[t];
    const bool ok = pair.isArray() && pair.asArray().size() == 2 &&
                    std::all_of(pair.asArray().begin(), pair.asArray().end(), [&](const Value& v) {
                      return v.type() == Type::Int && v.asInt64() >= 0 && v.asInt64() < nranks;
                    });
    if (!ok)
      error(where, "scratch_blocks[" + std::to_string(t) + "] must be [src, dst] with ranks in [0, " +
                       std::to_string(nranks) + "), got " + show(pair));
  }
}

std::vector<int64_t> Checker::channels(const Value::Array& list, int64_t rank, int64_t nranks, const std::string& where) {
  std::vector<int64_t> peers;
  for (size_t position = 0; position < list.size(); ++position) {
    const Value& channel = list[position];
    const std::string here = where + ", channel " + std::to_string(position);
    peers.push_back(-1);
    if (!channel.isObject()) {
      error(here, "must be an object, got " + show(channel));
      continue;
    }
    keys(channel, kChannelKeys, kChannelKeys, here);
    const Value* id = channel.find("id");
    if (id == nullptr || id->type() != Type::Int || id->asInt64() != static_cast<int64_t>(position)) {
      bad(here, "id", id, std::to_string(position) + " (channels are listed in id order)");
    }
    const Value* transport = channel.find("transport");
    Transport parsed{};
    if (transport == nullptr || !transport->isString() || !parse(transport->asString(), parsed)) {
      bad(here, "transport", transport, "one of " + joinedNames<Transport, kTransportCount>());
    }
    const Value* peer = channel.find("peer");
    if (!isInt(peer) || compare(*peer, 0) < 0 || compare(*peer, nranks) >= 0) {
      error(here, "'peer' " + show(peer) + " is not a rank (0.." + std::to_string(nranks - 1) + ")");
      continue;
    }
    peers.back() = peer->asInt64();
    ++channelCounts_[{rank, peer->asInt64()}];
  }
  return peers;
}

void Checker::workers(const Value::Array& list, int64_t rank, size_t channelCount, const std::string& where) {
  std::map<int64_t, size_t> owner;  // channel id -> the worker that first used it
  for (size_t position = 0; position < list.size(); ++position) {
    const Value& worker = list[position];
    const std::string here = where + ", worker " + std::to_string(position);
    if (!worker.isObject()) {
      error(here, "must be an object, got " + show(worker));
      continue;
    }
    keys(worker, kWorkerKeys, kWorkerKeys, here);
    const Value* id = worker.find("id");
    if (id == nullptr || id->type() != Type::Int || id->asInt64() != static_cast<int64_t>(position)) {
      bad(here, "id", id, std::to_string(position) + " (workers are listed in id order)");
    }
    const Value* ops = worker.find("ops");
    if (ops == nullptr || !ops->isArray()) {
      error(here, "'ops' must be a list, got " + show(ops));
      continue;
    }
    for (size_t step = 0; step < ops->asArray().size(); ++step) {
      const Value& entry = ops->asArray()[step];
      const std::string at = here + ", step " + std::to_string(step);
      const int64_t channel = op(entry, rank, channelCount, at);
      if (channel < 0) continue;
      const size_t first = owner.emplace(channel, position).first->second;
      if (first != position) {
        error(at + " (" + entry.find("op")->asString() + ")",
              "channel " + std::to_string(channel) + " is already used by worker " + std::to_string(first) +
                  "; a channel belongs to one worker");
      }
    }
  }
}

// Checks one op; returns its channel id when it names a valid one, else -1.
int64_t Checker::op(const Value& op, int64_t rank, size_t channelCount, const std::string& at) {
  if (!op.isObject()) {
    error(at, "an op must be an object, got " + show(op));
    return -1;
  }
  const Value* opName = op.find("op");
  OpCode code{};
  if (opName == nullptr || !opName->isString() || !parse(opName->asString(), code)) {
    error(at, "'op' " + show(opName) + " is not one of " + joinedNames<OpCode, kOpCount>());
    return -1;
  }
  const std::string where = at + " (" + opName->asString() + ")";
  std::vector<std::string> allowed = {"op"}, required;
  for (const std::string& field : opFields(code)) {
    allowed.push_back(field);
    if (field != "n") required.push_back(field);
  }
  keys(op, allowed, required, where);
  uint64_t count = 1;
  if (op.find("n") != nullptr && intField(op, "n", where, 1, false, limits_.maxChunks)) count = op.find("n")->asUInt64();
  int64_t channel = -1;
  if (const Value* ch = op.find("ch")) {
    if (!isInt(ch) || compare(*ch, 0) < 0 || compare(*ch, static_cast<int64_t>(channelCount)) >= 0) {
      const std::string has = channelCount ? "0.." + std::to_string(channelCount - 1) : "none";
      error(where, "'ch' " + show(ch) + " is not a channel of rank " + std::to_string(rank) + " (has " + has + ")");
    } else {
      channel = ch->asInt64();
    }
  }
  for (const char* field : kRefFields) {
    if (const Value* r = op.find(field)) ref(*r, count, where, field);
  }
  if (const Value* srcs = op.find("srcs")) {
    if (!srcs->isArray() || srcs->asArray().empty()) {
      error(where, "'srcs' must be a non-empty list of chunk refs, got " + show(srcs));
    } else {
      for (size_t i = 0; i < srcs->asArray().size(); ++i) {
        ref(srcs->asArray()[i], count, where, "srcs[" + std::to_string(i) + "]");
      }
    }
  }
  parts(op, where);
  return channel;
}

bool refShape(const Value& ref, Buffer* buffer = nullptr) {
  if (!ref.isArray() || ref.asArray().size() != 2) return false;
  const Value& name = ref.asArray()[0];
  const Value& index = ref.asArray()[1];
  Buffer parsed{};
  if (!name.isString() || !parse(name.asString(), parsed) || !isInt(&index) || compare(index, 0) < 0) return false;
  if (buffer) *buffer = parsed;
  return true;
}

void Checker::ref(const Value& ref, uint64_t count, const std::string& where, const std::string& field) {
  Buffer buffer{};
  if (!refShape(ref, &buffer)) {
    error(where, repr(field) + " " + show(ref) + " is not a chunk ref [buffer, index >= 0] with buffer one of " +
                     joinedNames<Buffer, kBufferCount>());
    return;
  }
  const Value& index = ref.asArray()[1];
  const uint64_t size = bufferChunks_[static_cast<int>(buffer)];
  const bool inRange = index.type() == Type::Int && static_cast<uint64_t>(index.asInt64()) + count <= size;
  if (!inRange) {
    const std::string span = count > 1 ? "chunks " + plus(index, 0) + ".." + plus(index, count - 1) : "chunk " + plus(index, 0);
    error(where, repr(field) + " " + show(ref) + " with n=" + std::to_string(count) + " is out of range: " + span + " of " +
                     repr(name(buffer)) + ", which has " + std::to_string(size) + " chunks");
  }
}

// Chunks of different part indices differ in length when the count does not divide by
// chunks_per_block, so an op may pair only chunks of the same part (index mod k).
void Checker::parts(const Value& op, const std::string& where) {
  std::set<uint64_t> found;
  const auto add = [&](const Value& ref) {
    if (ref.isArray() && ref.asArray().size() == 2 && isInt(&ref.asArray()[1]) && compare(ref.asArray()[1], 0) >= 0) {
      found.insert(modulo(ref.asArray()[1], chunksPerBlock_));
    }
  };
  for (const char* field : kRefFields) {
    if (const Value* r = op.find(field)) add(*r);
  }
  if (const Value* srcs = op.find("srcs"); srcs != nullptr && srcs->isArray()) {
    for (const Value& r : srcs->asArray()) add(r);
  }
  if (found.size() > 1) {
    std::string list;
    for (uint64_t part : found) list += (list.empty() ? "" : ", ") + std::to_string(part);
    const std::string k = std::to_string(chunksPerBlock_);
    error(where, "pairs chunks of different parts [" + list + "] (index mod chunks_per_block=" + k +
                     "); their lengths differ when the count does not divide by " + k +
                     ": use chunk indices with the same remainder");
  }
}

}  // namespace

std::vector<std::string> validationErrors(const Value& plan, const std::string& source, const Limits& limits) {
  Checker check(source, limits);
  check.plan(plan);
  return std::move(check.errors);
}

struct RankByRankValidator::State {
  State(const std::string& source, const Limits& limits) : check(source, limits) {}
  Checker check;
  bool headerOk = false;
  bool checking = false;  // the header passed and the op limit is not passed yet
  size_t ranks = 0;       // entries seen
};

RankByRankValidator::RankByRankValidator(const std::string& source, const Limits& limits)
    : source_(source), limits_(limits), state_(std::make_unique<State>(source_, limits_)) {}

RankByRankValidator::~RankByRankValidator() = default;

bool RankByRankValidator::header(const Value& plan) {
  state_->headerOk = state_->checking = state_->check.header(plan);
  if (state_->headerOk) state_->check.ranksBegin(plan);
  return state_->headerOk;
}

void RankByRankValidator::rank(const Value& entry) {
  const size_t position = state_->ranks++;
  if (state_->checking) state_->checking = state_->check.rank(entry, position);
}

bool RankByRankValidator::clean() const { return state_->headerOk && state_->check.errors.empty(); }

std::vector<std::string> RankByRankValidator::finish() {
  Checker& check = state_->check;
  if (state_->headerOk) {
    if (static_cast<int64_t>(state_->ranks) != check.nranks()) {
      check.errors.clear();  // validationErrors checks the count before any entry: that error alone
      check.rankCount(check.nranks(), std::to_string(state_->ranks) + " entries");
    } else if (state_->checking) {
      check.ranksEnd();
    }
  }
  return std::move(check.errors);
}

}  // namespace forestcc::plan
