#include "forestcc/collectives.hpp"

#include <iterator>

namespace forestcc {

namespace {
#define FORESTCC_TYPE_NAME(name, text, size) text,
#define FORESTCC_TYPE_SIZE(name, text, size) size,
#define FORESTCC_OP_NAME(name, text) text,
constexpr const char* kTypeNames[] = {FORESTCC_DATA_TYPES(FORESTCC_TYPE_NAME)};
constexpr size_t kTypeSizes[] = {FORESTCC_DATA_TYPES(FORESTCC_TYPE_SIZE)};
constexpr const char* kOpNames[] = {FORESTCC_REDUCE_OPS(FORESTCC_OP_NAME)};
#undef FORESTCC_TYPE_NAME
#undef FORESTCC_TYPE_SIZE
#undef FORESTCC_OP_NAME

template <class E, size_t N>
bool parseName(const char* const (&names)[N], const std::string& text, E& out) {
  for (size_t i = 0; i < N; ++i)
    if (text == names[i]) {
      out = static_cast<E>(i);
      return true;
    }
  return false;
}
}  // namespace

bool valid(DataType t) { return static_cast<size_t>(t) < std::size(kTypeNames); }
bool valid(ReduceOp op) { return static_cast<size_t>(op) < std::size(kOpNames); }
const char* name(DataType t) { return valid(t) ? kTypeNames[static_cast<int>(t)] : "<invalid dtype>"; }
const char* name(ReduceOp op) { return valid(op) ? kOpNames[static_cast<int>(op)] : "<invalid op>"; }
size_t elementSize(DataType t) { return valid(t) ? kTypeSizes[static_cast<int>(t)] : 0; }
bool parse(const std::string& text, DataType& out) {
  // numpy's (ml_dtypes') and torch's name for e4m3 says "fn" (finite, one NaN); accept it too.
  if (text == "float8_e4m3fn") return out = DataType::Float8E4M3, true;
  return parseName(kTypeNames, text, out);
}
bool parse(const std::string& text, ReduceOp& out) { return parseName(kOpNames, text, out); }

}  // namespace forestcc
