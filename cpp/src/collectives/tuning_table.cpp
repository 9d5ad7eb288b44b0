#include "collectives/tuning_table.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "collectives/default_tuning.hpp"
#include "collectives/generators.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"
#include "plan/json.hpp"

namespace forestcc::collectives {

namespace {

constexpr int64_t kVersion = 1;
const char* const kRuleKeys[] = {"collective", "min_ranks", "max_ranks", "min_bytes", "max_bytes", "algorithm"};
const char* const kOptionalKeys[] = {"memory", "in_place", "min_nodes", "max_nodes"};
// Rules may name all_to_all_v; they are checked like the others, then dropped (all_to_all_v shares
// all_to_all's rules).
const char* const kAllToAllV = "all_to_all_v";

[[noreturn]] void refuse(const std::string& message) { throw Error(ErrorCode::InvalidUsage, message); }

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

uint64_t nonNegative(const json::Value& v, const std::string& where, const char* key) {
  if (!v.isInteger() || (v.type() == json::Type::Int && v.asInt64() < 0))
    refuse(where + ": " + key + " must be a non-negative integer");
  return v.asUInt64();
}

int rankCount(const json::Value& v, const std::string& where, const char* key) {
  const uint64_t n = nonNegative(v, where, key);
  return n > (1u << 30) ? (1 << 30) : static_cast<int>(n);  // more ranks than any job has
}

TuningRule parseRule(const json::Value& rule, const std::string& where) {
  bool keysOk = rule.isObject();
  if (keysOk) {
    for (const char* key : kRuleKeys) keysOk = keysOk && rule.find(key);
    for (const auto& member : rule.asObject()) {
      bool known = false;
      for (const char* key : kRuleKeys) known = known || member.first == key;
      for (const char* key : kOptionalKeys) known = known || member.first == key;
      keysOk = keysOk && known;
    }
  }
  if (!keysOk)
    refuse(where + ": needs exactly the keys collective, min_ranks, max_ranks, min_bytes, max_bytes, algorithm "
                   "(and optionally memory, in_place, min_nodes, max_nodes)");
  TuningRule r;
  if (const json::Value* memory = rule.find("memory")) {
    const std::string kind = memory->isString() ? memory->asString() : "";
    if (kind != "private" && kind != "shared" && kind != "device")
      refuse(where + ": memory must be one of private, shared, device, got " + json::dump(*memory));
    r.memory = kind == "shared" ? kSharedMemory : kind == "device" ? kDeviceMemory : kPrivateMemory;
  }
  if (const json::Value* inPlace = rule.find("in_place")) {
    if (!inPlace->isBool()) refuse(where + ": in_place must be true or false, got " + json::dump(*inPlace));
    r.inPlace = inPlace->asBool() ? kInPlace : kOutOfPlace;
  }
  if (const json::Value* minNodes = rule.find("min_nodes")) {
    if (minNodes->type() != json::Type::Int || minNodes->asInt64() < 1)
      refuse(where + ": min_nodes must be an integer >= 1, got " + json::dump(*minNodes));
    r.minNodes = rankCount(*minNodes, where, "min_nodes");
  }
  if (const json::Value* maxNodes = rule.find("max_nodes")) {
    if (maxNodes->isNull()) {
      r.maxNodes = 1 << 30;
    } else {
      if (maxNodes->type() != json::Type::Int || maxNodes->asInt64() < r.minNodes)
        refuse(where + ": max_nodes must be null or an integer >= min_nodes, got " + json::dump(*maxNodes));
      r.maxNodes = rankCount(*maxNodes, where, "max_nodes");
    }
  }
  if (r.maxNodes < r.minNodes)
    refuse(where + ": min_nodes " + std::to_string(r.minNodes) + " needs max_nodes (an integer >= it, or null)");
  const json::Value& coll = *rule.find("collective");
  const bool allToAllV = coll.isString() && coll.asString() == kAllToAllV;
  if (allToAllV) r.collective = plan::Collective::AllToAll;
  if (!coll.isString() || !(allToAllV || plan::parse(coll.asString(), r.collective)))
    refuse(where + ": unknown collective " + json::dump(coll));
  const json::Value& algo = *rule.find("algorithm");
  if (!algo.isString() || !isAlgorithm(algo.asString()))
    refuse(where + ": unknown algorithm " + json::dump(algo) + " (built-in: " + joined(algorithmNames()) + ")");
  r.algorithm = algo.asString();
  // One that does not serve the collective would fail every call it chose, far from this file.
  const std::vector<plan::Collective> serves = algorithmCollectives(r.algorithm);
  if (!allToAllV && std::find(serves.begin(), serves.end(), r.collective) == serves.end()) {
    std::vector<std::string> names;
    for (plan::Collective c : serves) names.push_back(plan::traits(c).name);
    refuse(where + ": algorithm '" + r.algorithm + "' does not implement " + coll.asString() + " (it implements " +
           joined(names) + ")");
  }
  r.minRanks = rankCount(*rule.find("min_ranks"), where, "min_ranks");
  r.maxRanks = rankCount(*rule.find("max_ranks"), where, "max_ranks");
  r.minBytes = nonNegative(*rule.find("min_bytes"), where, "min_bytes");
  const json::Value& maxBytes = *rule.find("max_bytes");
  if (!maxBytes.isNull()) {
    if (maxBytes.type() != json::Type::Int || maxBytes.asInt64() < 0 ||
        static_cast<uint64_t>(maxBytes.asInt64()) < r.minBytes)
      refuse(where + ": max_bytes must be null or an integer >= min_bytes");
    r.maxBytes = maxBytes.asInt64();
  }
  return r;
}

bool readFile(const std::string& path, std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  text = s.str();
  return true;
}

// Where forestcc-perf --tune writes this machine's table (python/forestcc/tuning.py, user_path).
std::string userTablePath() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  std::string base = xdg && *xdg ? xdg : home && *home ? std::string(home) + "/.config" : "";
  return base.empty() ? "" : base + "/forestcc/tuning.json";
}

}  // namespace

std::vector<TuningRule> parseTuningTable(const std::string& text, const std::string& source) {
  const json::Value table = json::parse(text, source);
  const json::Value* version = table.isObject() ? table.find("version") : nullptr;
  if (!version || version->type() != json::Type::Int || version->asInt64() != kVersion)
    refuse(source + ": not a forestcc tuning table (need version " + std::to_string(kVersion) + ")");
  const json::Value* rules = table.find("rules");
  if (!rules || !rules->isArray()) refuse(source + ": 'rules' must be a list");
  std::vector<TuningRule> out;
  const json::Value::Array& items = rules->asArray();
  for (size_t i = 0; i < items.size(); ++i) {
    TuningRule rule = parseRule(items[i], source + ": rule " + std::to_string(i));
    if (items[i].find("collective")->asString() != kAllToAllV) out.push_back(std::move(rule));
  }
  return out;
}

void clampToAlgorithms(std::vector<TuningRule>& rules, int nranks) {
  for (size_t i = 0; i < rules.size(); ++i) {
    TuningRule& r = rules[i];
    const int64_t limit = algorithmMaxBytes(r.algorithm, r.collective, nranks);
    if (limit < 0 || (r.maxBytes >= 0 && r.maxBytes <= limit)) continue;
    const int64_t oldMax = r.maxBytes;
    r.maxBytes = limit;
    for (size_t j = i + 1; j < rules.size() && oldMax >= 0; ++j) {
      TuningRule& next = rules[j];
      if (next.collective == r.collective && next.minRanks == r.minRanks && next.maxRanks == r.maxRanks &&
          next.minNodes == r.minNodes && next.maxNodes == r.maxNodes && next.memory == r.memory &&
          next.inPlace == r.inPlace && next.minBytes == static_cast<uint64_t>(oldMax) + 1) {
        next.minBytes = static_cast<uint64_t>(limit) + 1;
        break;
      }
    }
  }
}

const std::string& selectAlgorithm(const std::vector<TuningRule>& rules, const CallShape& call) {
  static const std::string kNone, kEager = "eager";
  for (const TuningRule& r : rules) {
    if (r.collective != call.collective || call.nranks < r.minRanks || call.nranks > r.maxRanks) continue;
    if (call.nodes < r.minNodes || call.nodes > r.maxNodes || call.bytes < r.minBytes) continue;
    // GPU calls match only rules for GPU memory; host calls rules for their kind or any.
    if (call.memory == kDeviceMemory ? r.memory != kDeviceMemory : r.memory != kAnyMemory && r.memory != call.memory)
      continue;
    if (r.inPlace != kAnyPlacement && r.inPlace != call.inPlace) continue;
    if (r.maxBytes >= 0 && call.bytes > static_cast<uint64_t>(r.maxBytes)) continue;
    if (call.nodes > 1 && r.algorithm == kEager) continue;
    return r.algorithm;
  }
  return kNone;
}

std::vector<TuningRule> loadTuningTable() {
  std::string path = configString("FORESTCC_TUNING");
  std::string text;
  if (path.empty()) {
    const std::string user = userTablePath();
    if (user.empty() || !readFile(user, text)) return parseTuningTable(kDefaultTuningJson, "<built-in tuning table>");
    return parseTuningTable(text, user);
  }
  if (!readFile(path, text)) refuse(path + ": cannot read the tuning table (" + std::strerror(errno) + ")");
  return parseTuningTable(text, path);
}

}  // namespace forestcc::collectives
