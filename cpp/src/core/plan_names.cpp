#include <cstring>

#include "forestcc/plan.hpp"

namespace forestcc::plan {

namespace {
#define FORESTCC_NAME_ENTRY(name, text, ...) text,
constexpr const char* kCollectiveNames[] = {FORESTCC_PLAN_COLLECTIVES(FORESTCC_NAME_ENTRY)};
constexpr const char* kBufferNames[] = {FORESTCC_PLAN_BUFFERS(FORESTCC_NAME_ENTRY)};
constexpr const char* kOpNames[] = {FORESTCC_PLAN_OPS(FORESTCC_NAME_ENTRY)};
constexpr const char* kTransportNames[] = {FORESTCC_PLAN_TRANSPORTS(FORESTCC_NAME_ENTRY)};
#undef FORESTCC_NAME_ENTRY

template <class E, size_t N>
bool parseName(const char* const (&names)[N], const std::string& text, E& out) {
  for (size_t i = 0; i < N; ++i) {
    if (text == names[i]) {
      out = static_cast<E>(i);
      return true;
    }
  }
  return false;
}
}  // namespace

const char* name(Collective c) { return kCollectiveNames[static_cast<int>(c)]; }
const char* name(Buffer b) { return kBufferNames[static_cast<int>(b)]; }
const char* name(OpCode op) { return kOpNames[static_cast<int>(op)]; }
bool parse(const std::string& text, Collective& out) { return parseName(kCollectiveNames, text, out); }
bool parse(const std::string& text, Buffer& out) { return parseName(kBufferNames, text, out); }
bool parse(const std::string& text, OpCode& out) { return parseName(kOpNames, text, out); }
const char* name(Transport t) { return kTransportNames[static_cast<int>(t)]; }
bool parse(const std::string& text, Transport& out) { return parseName(kTransportNames, text, out); }

const char* name(Blocks b) { return b == Blocks::None ? "none" : b == Blocks::One ? "one" : "per_rank"; }
const char* name(RootOnly r) { return r == RootOnly::Neither ? "neither" : r == RootOnly::Input ? "input" : "output"; }

}  // namespace forestcc::plan
