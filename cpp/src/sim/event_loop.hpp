// The plan simulator's event loop (forestcc.plan.simulator, whose docstring is the model).
//
// Why native: the model is a discrete-event simulation with one event per transfer and link; a
// 256-rank forest at 1 GiB makes 8 million transfers, several minutes in Python and seconds
// here. Python keeps everything that is not the loop (reading the plan, choosing routes, sizing
// ops and slices) and hands over flat arrays, so the route choice stays in one place and the
// Python loop (simulator.py, the reference) runs on the very same input. Every arithmetic step is
// written in the reference's order on doubles and every queue is ordered by the same unique keys,
// so both give the same time to the last bit.
#pragma once

#include <cstdint>
#include <vector>

namespace forestcc::sim {

// Decoded op kinds, as simulator.py numbers them.
enum OpKind : int64_t { kWait = 0, kSignal = 1, kTransfer = 2, kFlush = 3, kLocal = 4 };
// Fields of one decoded op in SimInput::ops: kind, channel (-1: none), the first chunk and the
// number of chunks it moves, a multiplier of its bytes (a reduction's sources), flags.
constexpr int kOpFields = 6;
constexpr int64_t kFlagGet = 1;          // the bytes come from the peer, over its route
constexpr int64_t kFlagSignalAfter = 2;  // put_signal: the signal rides behind the data

struct SimInput {
  std::vector<double> linkBandwidth;       // bytes per microsecond, per directed link
  std::vector<int64_t> channelLinkStart;   // channel c's links: channelLinks[start[c]..start[c+1])
  std::vector<int64_t> channelLinks;
  std::vector<double> channelLatency;      // the route's summed latency, microseconds
  std::vector<int64_t> partner;            // the channel at the other end
  std::vector<int64_t> workerOpStart;      // worker w's ops: ops[kOpFields * start[w] ...)
  std::vector<int64_t> ops;
  int64_t count = 0;                       // elements per block (the plan's c)
  int64_t chunksPerBlock = 1;              // k: chunk i of a block starts at (i % k) * c / k
  std::vector<int64_t> smallBytes;         // per slice: bytes of a chunk of q = c / k elements
  std::vector<int64_t> bigBytes;           // per slice: bytes of a chunk of q + 1 elements
  double memBandwidth = 0;                 // bytes per microsecond of local work; 0: free
};

struct SimOutput {
  double timeUs = 0;
  int64_t transfers = 0;
  // Workers that never finished (deadlock): (worker, op index, slice), the first few.
  std::vector<std::vector<int64_t>> stuck;
};

// Runs every worker through all slices; throws std::invalid_argument on malformed input.
SimOutput runEvents(const SimInput& input);

}  // namespace forestcc::sim
