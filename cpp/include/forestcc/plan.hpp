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

#define FORESTCC_PLAN_COLLECTIVES(X)                                                        \
  X(AllReduce, "all_reduce") X(AllGather, "all_gather") X(ReduceScatter, "reduce_scatter") \
  X(AllToAll, "all_to_all") X(Broadcast, "broadcast") X(Reduce, "reduce")                  \
  X(Gather, "gather") X(Scatter, "scatter") X(SendRecv, "sendrecv") X(Barrier, "barrier")

#define FORESTCC_PLAN_BUFFERS(X) X(Input, "input") X(Output, "output") X(Scratch, "scratch")

#define FORESTCC_PLAN_TRANSPORTS(X) X(Auto, "auto") X(Shm, "shm") X(CudaIpc, "cuda_ipc") X(Tcp, "tcp")

// Memory ordering of each op is documented in schedules/README.md ("Memory ordering").
#define FORESTCC_PLAN_OPS(X)                                                  \
  X(Put, "put") X(Get, "get") X(Signal, "signal") X(Wait, "wait")            \
  X(Flush, "flush") X(Copy, "copy") X(Reduce, "reduce")                      \
  X(ReducePut, "reduce_put") X(PutSignal, "put_signal") X(GetReduce, "get_reduce")

#define FORESTCC_ENUM_ENTRY(name, text) name,
enum class Collective : uint8_t { FORESTCC_PLAN_COLLECTIVES(FORESTCC_ENUM_ENTRY) };
enum class Buffer : uint8_t { FORESTCC_PLAN_BUFFERS(FORESTCC_ENUM_ENTRY) };
enum class Transport : uint8_t { FORESTCC_PLAN_TRANSPORTS(FORESTCC_ENUM_ENTRY) };
enum class OpCode : uint8_t { FORESTCC_PLAN_OPS(FORESTCC_ENUM_ENTRY) };
#undef FORESTCC_ENUM_ENTRY

#define FORESTCC_COUNT_ENTRY(name, text) +1
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

struct RankProgram {
  std::vector<ChannelSpec> channels;
  std::vector<WorkerProgram> workers;
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

// True for broadcast, reduce, gather, scatter.
bool rooted(Collective c);
// Input and output blocks of a collective for `nranks` (see "Buffers and chunks").
int inputBlocks(Collective c, int nranks);
int outputBlocks(Collective c, int nranks);

}  // namespace forestcc::plan
