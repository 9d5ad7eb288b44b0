// The plan contract shared by the JSON loader and the CPU and GPU interpreters: enums with their
// format-v1 names (generated from one X-macro list each, never kept in sync by hand) and the
// fixed-size operation record. The Python side (forestcc.plan.ops) is checked against these
// names by tests/test_plan_contract.py.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace forestcc::plan {

constexpr int kFormatVersion = 1;

// One row per collective: everything that differs between collectives besides their generators
// (validation, stand-in buffers, in-place detection, buffer sizes in the perf CLI and the Python
// API all read these rows; a new collective is one row plus its generators). Columns: enum, format
// name, rooted (takes a root), reduces (takes a reduction op), input and output blocks (Blocks:
// a buffer of `count` elements, one of nranks x `count`, or none), the buffer only the root has
// (RootOnly; other ranks pass none and forestcc stages a stand-in), and whether an in-place form
// exists (same memory when both buffers have as many blocks; else the smaller buffer is the
// larger one's block number `rank`).
#define FORESTCC_PLAN_COLLECTIVES(X) \
  /* enum          name              rooted reduces input    output   root-only in-place */ \
  X(AllReduce,     "all_reduce",     false, true,  One,     One,     Neither, true) \
  X(AllGather,     "all_gather",     false, false, One,     PerRank, Neither, true) \
  X(ReduceScatter, "reduce_scatter", false, true,  PerRank, One,     Neither, true) \
  X(AllToAll,      "all_to_all",     false, false, PerRank, PerRank, Neither, true) \
  X(Broadcast,     "broadcast",      true,  false, One,     One,     Neither, true) \
  X(Reduce,        "reduce",         true,  true,  One,     One,     Neither, true) \
  X(Gather,        "gather",         true,  false, One,     PerRank, Output,  false) \
  X(Scatter,       "scatter",        true,  false, PerRank, One,     Input,   false) \
  X(SendRecv,      "sendrecv",       false, false, One,     One,     Neither, false) \
  X(Barrier,       "barrier",        false, false, None,    None,    Neither, false)

#define FORESTCC_PLAN_BUFFERS(X) X(Input, "input") X(Output, "output") X(Scratch, "scratch")

#define FORESTCC_PLAN_TRANSPORTS(X) X(Auto, "auto") X(Shm, "shm") X(CudaIpc, "cuda_ipc") X(Tcp, "tcp")

// Memory ordering of each op is documented in schedules/README.md ("Memory ordering").
#define FORESTCC_PLAN_OPS(X)                                                  \
  X(Put, "put") X(Get, "get") X(Signal, "signal") X(Wait, "wait")            \
  X(Flush, "flush") X(Copy, "copy") X(Reduce, "reduce")                      \
  X(ReducePut, "reduce_put") X(PutSignal, "put_signal") X(GetReduce, "get_reduce")

#define FORESTCC_ENUM_ENTRY(name, text, ...) name,
enum class Collective : uint8_t { FORESTCC_PLAN_COLLECTIVES(FORESTCC_ENUM_ENTRY) };
enum class Buffer : uint8_t { FORESTCC_PLAN_BUFFERS(FORESTCC_ENUM_ENTRY) };
enum class Transport : uint8_t { FORESTCC_PLAN_TRANSPORTS(FORESTCC_ENUM_ENTRY) };
enum class OpCode : uint8_t { FORESTCC_PLAN_OPS(FORESTCC_ENUM_ENTRY) };
#undef FORESTCC_ENUM_ENTRY

#define FORESTCC_COUNT_ENTRY(name, text, ...) +1
constexpr int kCollectiveCount = 0 FORESTCC_PLAN_COLLECTIVES(FORESTCC_COUNT_ENTRY);
constexpr int kBufferCount = 0 FORESTCC_PLAN_BUFFERS(FORESTCC_COUNT_ENTRY);
constexpr int kTransportCount = 0 FORESTCC_PLAN_TRANSPORTS(FORESTCC_COUNT_ENTRY);
constexpr int kOpCount = 0 FORESTCC_PLAN_OPS(FORESTCC_COUNT_ENTRY);
#undef FORESTCC_COUNT_ENTRY

const char* name(Collective c);
const char* name(Buffer b);
const char* name(Transport t);
const char* name(OpCode op);
// Parse a format-v1 name; false when unknown.
bool parse(const std::string& text, Collective& out);
bool parse(const std::string& text, Buffer& out);
bool parse(const std::string& text, Transport& out);
bool parse(const std::string& text, OpCode& out);

// A chunk reference: `count` contiguous chunks of `buffer` starting at `index`.
struct ChunkRef {
  Buffer buffer;
  uint32_t index;
};

// Limits that keep the record fixed-size; plans that exceed them are refused when loaded.
constexpr int kMaxReduceSources = 8;

// One operation, plain data so the same array serves CPU threads and GPU thread blocks.
struct Op {
  OpCode code;
  uint8_t sourceCount;  // reduce / reduce_put / get_reduce: entries used in `sources`
  uint16_t channel;     // index into the rank's channels (put, get, signal, wait, flush, *_put)
  uint32_t count;       // contiguous chunks ("n")
  ChunkRef src;         // put, get (on the peer), copy, put_signal, get_reduce (on the peer)
  ChunkRef dst;         // put (on the peer), get, copy, reduce, reduce_put, put_signal (on the peer),
                        // get_reduce
  ChunkRef remote;      // reduce_put: where the result lands on the peer
  ChunkRef sources[kMaxReduceSources];  // local; get_reduce adds the peer's src as one more
};

// A whole plan (every rank), the in-memory form of a format-v1 file. Generators build it, the
// Python binding converts it to and from the JSON dict, the executor takes one rank's part.
struct ChannelSpec {
  int peer = 0;
  Transport transport = Transport::Auto;
};

struct WorkerProgram {
  std::vector<Op> ops;
};

// Which block of data a scratch block holds: the one rank `src` sends to rank `dst`.
struct BlockSource {
  int32_t src = 0;
  int32_t dst = 0;
};

struct RankProgram {
  std::vector<ChannelSpec> channels;
  std::vector<WorkerProgram> workers;
  // Optional ("scratch_blocks"): scratch block t holds the block rank src sends to rank dst. With
  // it, all_to_all_v (uneven blocks) can run the plan: scratch block t is then as long as that
  // block of the call (schedules/README.md, "all_to_all_v and scratch").
  std::vector<BlockSource> scratchBlocks;
};

struct Plan {
  std::string name;
  Collective collective = Collective::AllReduce;
  int nranks = 1;
  int root = -1;                 // rooted collectives only
  bool inPlace = false;
  uint32_t chunksPerBlock = 1;   // k
  uint64_t inputChunks = 0;
  uint64_t outputChunks = 0;
  uint64_t scratchChunks = 0;
  uint64_t minBytes = 0;
  int64_t maxBytes = -1;         // -1: no upper bound
  uint32_t maxSlices = 1;
  uint64_t minSliceBytes = 0;
  // 1: scratch serves one call at a time (peers touch it only after this rank entered).
  // 2: eager plans: scratch alternates between two banks on successive such calls, so a peer may
  // write this rank's bank before it entered (schedules/README.md, "Scratch banks").
  uint32_t scratchBanks = 1;
  std::string generator;
  std::map<std::string, int64_t> params;  // provenance.params (integers/bools only from C++)
  std::vector<RankProgram> ranks;
};

// How many blocks of the call's `count` elements a buffer holds (schedules/README.md, "Buffers
// and chunks"): none, one, or one per rank.
enum class Blocks : uint8_t { None, One, PerRank };
// The buffer that only the root passes (the other ranks have none).
enum class RootOnly : uint8_t { Neither, Input, Output };

// A row of FORESTCC_PLAN_COLLECTIVES.
struct CollectiveTraits {
  const char* name;
  bool rooted;      // takes a root
  bool reduces;     // takes a reduction op
  Blocks input;
  Blocks output;
  RootOnly rootOnly;
  bool inPlace;     // has an in-place form
};

#define FORESTCC_TRAITS_ENTRY(name, text, rooted, reduces, input, output, rootOnly, inPlace) \
  {text, rooted, reduces, Blocks::input, Blocks::output, RootOnly::rootOnly, inPlace},
inline constexpr CollectiveTraits kCollectiveTraits[] = {FORESTCC_PLAN_COLLECTIVES(FORESTCC_TRAITS_ENTRY)};
#undef FORESTCC_TRAITS_ENTRY

constexpr const CollectiveTraits& traits(Collective c) { return kCollectiveTraits[static_cast<int>(c)]; }
// True for broadcast, reduce, gather, scatter.
constexpr bool rooted(Collective c) { return traits(c).rooted; }
// True for all_reduce, reduce_scatter, reduce: the collectives that take a reduction op.
constexpr bool reduces(Collective c) { return traits(c).reduces; }
constexpr int blocks(Blocks b, int nranks) { return b == Blocks::None ? 0 : b == Blocks::One ? 1 : nranks; }
// Input and output blocks of a collective for `nranks` (see "Buffers and chunks").
constexpr int inputBlocks(Collective c, int nranks) { return blocks(traits(c).input, nranks); }
constexpr int outputBlocks(Collective c, int nranks) { return blocks(traits(c).output, nranks); }
const char* name(Blocks b);
const char* name(RootOnly r);

}  // namespace forestcc::plan
