// Collective calls in C++: element types, reduction operators and the buffers of one call.
// The plan (forestcc/plan.hpp) says who moves which chunk; these say what the chunks hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace forestcc {

#define FORESTCC_DATA_TYPES(X)                                                               \
  X(Int8, "int8", 1) X(Uint8, "uint8", 1) X(Int32, "int32", 4) X(Uint32, "uint32", 4)         \
  X(Int64, "int64", 8) X(Uint64, "uint64", 8) X(Float16, "float16", 2)                       \
  X(BFloat16, "bfloat16", 2) X(Float32, "float32", 4) X(Float64, "float64", 8)               \
  X(Float8E4M3, "float8_e4m3", 1) X(Float8E5M2, "float8_e5m2", 1) /* e4m3: the OCP "fn" format */

#define FORESTCC_REDUCE_OPS(X) X(Sum, "sum") X(Prod, "prod") X(Min, "min") X(Max, "max") X(Avg, "avg")

#define FORESTCC_ENUM3(name, text, size) name,
#define FORESTCC_ENUM2(name, text) name,
enum class DataType : uint8_t { FORESTCC_DATA_TYPES(FORESTCC_ENUM3) };
enum class ReduceOp : uint8_t { FORESTCC_REDUCE_OPS(FORESTCC_ENUM2) };
#undef FORESTCC_ENUM3
#undef FORESTCC_ENUM2

// Names of values outside the enums are "<invalid ...>" (for the messages that refuse them).
const char* name(DataType t);
const char* name(ReduceOp op);
size_t elementSize(DataType t);  // 0 for a value outside the enum
// Whether a value (a C++ caller's cast, an ABI's integer) is one of the enum's.
bool valid(DataType t);
bool valid(ReduceOp op);
bool parse(const std::string& text, DataType& out);
bool parse(const std::string& text, ReduceOp& out);

// The memory and element layout of one collective call on this rank. `count` is the collective's
// block count c (schedules/README.md, "Buffers and chunks"). For all_to_all_v the blocks differ
// in size: inCounts/outCounts hold nranks element counts each (blocks are packed in rank order).
struct CallBuffers {
  void* input = nullptr;
  size_t inputBytes = 0;
  void* output = nullptr;
  size_t outputBytes = 0;
  uint64_t count = 0;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  bool preMultiplied = false;       // CallOptions::preMultiplied (a reduction's stamp says it)
  std::vector<uint64_t> inCounts;   // all_to_all_v only
  std::vector<uint64_t> outCounts;  // all_to_all_v only
};

}  // namespace forestcc
