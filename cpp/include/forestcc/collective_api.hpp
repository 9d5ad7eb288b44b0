// The C++ collective API: every collective of the Python API on a communicator's ranks, taking
// pointers, element counts, dtype, op, root, an algorithm and async options. It owns what every
// caller needs the same way (Python's forestcc.Communicator, the NCCL shim, C++ programs):
// argument checks (before any rank communicates; errors name the argument), in-place detection,
// stand-in buffers where a rank has no buffer (gather's output, scatter's input away from the
// root), algorithm choice (the tuning table with "auto") and the plan cache.
//
//   auto comm = std::make_shared<forestcc::Communicator>(forestcc::Bootstrap::fromEnvironment(60));
//   forestcc::Collectives coll(comm);
//   coll.allReduce({x, n, DataType::Float32}, {x, n, DataType::Float32}, ReduceOp::Sum);  // in place
//
// Calls on one Collectives object run one at a time in call order (asynchronous ones queued, a
// blocking one after everything queued before it). Like an NCCL communicator, one object takes
// calls from one thread at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "forestcc/collectives.hpp"
#include "forestcc/communicator.hpp"
#include "forestcc/plan.hpp"

namespace forestcc {

namespace executor {
struct CompiledPlan;
}
namespace collectives {
class Engine;
}

// The largest buffer a call takes, in bytes: more than any address space holds (2**57, x86-64's
// and AArch64's largest user space). A count whose byte size wraps around 64 bits would otherwise
// pass as a small buffer and move the wrong data: such a count is refused.
constexpr uint64_t kMaxBufferBytes = uint64_t(1) << 57;
inline bool fitsInMemory(uint64_t count, size_t elementBytes) {
  uint64_t bytes;
  return !__builtin_mul_overflow(count, uint64_t(elementBytes), &bytes) && bytes < kMaxBufferBytes;
}

// One buffer argument: `count` elements of `dtype` at `data` (contiguous). Tensor::absent() is a
// buffer a rank does not pass (gather's output and scatter's input away from the root).
struct Tensor {
  const void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::Float32;
  bool present = true;
  int device = -1;  // GPU memory: its CUDA device (any value >= 0 marks GPU memory); -1: host memory

  Tensor() = default;
  Tensor(const void* d, size_t n, DataType t) : data(d), count(n), dtype(t) {}
  static Tensor absent() {
    Tensor t;
    t.present = false;
    return t;
  }
  size_t bytes() const { return count * elementSize(dtype); }
};

// Which plan runs a call: "auto" (the tuning table), a built-in algorithm's name ("ring",
// "direct", ...; forestcc plan algorithms lists them), a plan file's path (loaded and validated by
// plan::loadPlanFile, compiled once per version of the file; prove new plans with
// `forestcc plan verify` first), or a compiled plan.
struct Algorithm {
  std::string name = "auto";
  std::shared_ptr<const executor::CompiledPlan> plan;  // when set, it runs and `name` is unused

  Algorithm() = default;
  Algorithm(const char* n) : name(n) {}
  Algorithm(std::string n) : name(std::move(n)) {}
  Algorithm(std::shared_ptr<const executor::CompiledPlan> p) : plan(std::move(p)) {}
};

struct CallOptions {
  Algorithm algorithm;
  bool async = false;  // queue the call and return its Work at once
  // GPU memory: the cudaStream_t the call is enqueued on (null: the legacy default stream). Calls
  // on GPU memory return once enqueued, as NCCL's do; their errors are raised by the next call,
  // Collectives::synchronize() or their Work's wait().
  void* stream = nullptr;
  // A reduction whose inputs the caller scaled per rank (NCCL's and PyTorch's PREMUL_SUM, a sum
  // of scaled inputs): its call stamp says so, so a rank that sums plainly is a mismatch rather
  // than a mixed result.
  bool preMultiplied = false;
};

// Completion of an asynchronous call.
class Work {
 public:
  Work() = default;
  // A call on GPU memory: `poll(true)` blocks until the GPU finished it (raising its error),
  // `poll(false)` only asks.
  explicit Work(std::function<bool(bool)> poll) : poll_(std::move(poll)) {}
  void wait();       // blocks until the call finished; rethrows its error
  bool completed();  // polls
  // Blocks until the call finished or `limit` passed (a call on GPU memory: until it finished,
  // as wait(), whose waits have their own slices); whether it finished. Its error is for wait().
  bool waitFor(std::chrono::milliseconds limit);
  // wait(), in slices with the host program's signal handlers between them (checkInterrupt:
  // Ctrl-C raises KeyboardInterrupt in Python; the call itself goes on).
  void waitInterruptibly();
  void finish(std::exception_ptr error);  // called by forestcc when the call ran

 private:
  std::function<bool(bool)> poll_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// Every argument of one collective call; the methods of Collectives fill it in. `out` of
// all_reduce, reduce and all_to_all may be `x` itself (in place); all_gather is in place when x
// is out's block number rank, reduce_scatter when out is x's block number rank.
struct CallRequest {
  plan::Collective collective = plan::Collective::AllReduce;
  bool variable = false;  // all_to_all_v: uneven blocks given by inSplits / outSplits
  Tensor x;               // the input
  Tensor out;             // the output
  ReduceOp op = ReduceOp::Sum;
  int64_t root = -1;      // rooted collectives (64-bit so that a huge value is refused, not cut)
  std::vector<uint64_t> inSplits, outSplits;  // all_to_all_v: elements to / from each rank
  CallOptions options;
};

// One message of a point-to-point batch (Collectives::sendRecv): `bytes` bytes to or from rank
// `peer`; `device` >= 0 marks GPU memory of that CUDA device (docs/gpu.md, "Send and receive"),
// -1 host memory. A message and the one that matches it on the peer must be of the same kind.
struct SendMessage {
  int64_t peer = -1;
  const void* data = nullptr;
  size_t bytes = 0;
  int device = -1;
};
struct RecvMessage {
  int64_t peer = -1;
  void* data = nullptr;
  size_t bytes = 0;
  int device = -1;
};

class Collectives {
 public:
  using WorkPtr = std::shared_ptr<Work>;

  // Uses the tuning table of FORESTCC_TUNING, else the one built into libforestcc.
  explicit Collectives(std::shared_ptr<Communicator> comm);
  ~Collectives();
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  int rank() const;
  int size() const;
  Communicator& communicator();
  collectives::Engine& engine();  // tuning, plan cache and queues (forestcc's own tools)

  // Each call returns its Work when options.async, else null (the call has finished). Errors:
  // forestcc::Error; InvalidUsage / InvalidType name the argument ("out: has 3 elements,
  // expected 4 (the size of x)").
  WorkPtr allReduce(Tensor x, Tensor out, ReduceOp op, const CallOptions& options = {});
  WorkPtr allGather(Tensor x, Tensor out, const CallOptions& options = {});
  WorkPtr reduceScatter(Tensor x, Tensor out, ReduceOp op, const CallOptions& options = {});
  WorkPtr allToAll(Tensor x, Tensor out, const CallOptions& options = {});
  WorkPtr allToAllV(Tensor x, Tensor out, std::vector<uint64_t> inSplits, std::vector<uint64_t> outSplits,
                    const CallOptions& options = {});
  WorkPtr broadcast(Tensor x, int64_t root, const CallOptions& options = {});  // in place in x
  WorkPtr reduce(Tensor x, Tensor out, int64_t root, ReduceOp op, const CallOptions& options = {});
  WorkPtr gather(Tensor x, Tensor out, int64_t root, const CallOptions& options = {});
  WorkPtr scatter(Tensor x, Tensor out, int64_t root, const CallOptions& options = {});
  WorkPtr barrier(const CallOptions& options = {});
  // For a layer above this API whose own checks refuse a collective before calling it (the
  // Python bindings, the NCCL shim): this rank will not take part in its next collective. The
  // refusal takes the call's place among this rank's collectives, so peers that entered the call
  // raise a MismatchError naming this rank instead of meeting its next call (schedules/README.md,
  // "Refused calls"). The calls above do this themselves for the errors they raise.
  void refuseCall() noexcept;
  // Whether a collective of this thread reached these calls' checks since clearReached() (per
  // thread): a layer above that refuses the calls its own work fails before that (the NCCL
  // shim's staging) refuses only those that did not reach this API, which refuses its own.
  static void clearReached();
  static bool reached();
  // Rendezvous point-to-point: a send completes when the receiver has copied the data. GPU
  // memory (device >= 0): enqueued on `stream` as sendRecv says.
  WorkPtr send(const void* data, size_t bytes, int64_t peer, bool async = false, int device = -1,
               void* stream = nullptr);
  WorkPtr recv(void* data, size_t bytes, int64_t peer, bool async = false, int device = -1,
               void* stream = nullptr);
  // A batch of sends and receives whose exchanges with all their peers progress at once (NCCL's
  // group of ncclSend/ncclRecv, torch's batch_isend_irecv); done when every message of it was
  // received. Messages between two ranks match in order, whatever the batches on either side (as
  // NCCL matches across groups: a batch of two sends may be received by two batches, and the
  // reverse); a message and its match have the same size and memory kind, else both ranks raise
  // InvalidUsage naming them. Messages to this rank itself pair with its receives from itself, in
  // the same batch.
  // GPU memory (messages with device >= 0, all of one device, peers on this node): the copies are
  // enqueued on `stream` (a cudaStream_t; null: the legacy default stream) and the call returns
  // once they are, after the host rendezvous with each peer, as NCCL's do: a receive's data is
  // ready for later work on the receiver's stream, and later work on the sender's stream runs
  // after the receiver's copy read the send buffer. With async, the Work finishes when the GPU
  // did; synchronize() waits for every enqueued batch.
  WorkPtr sendRecv(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs, bool async = false,
                   void* stream = nullptr);
  // For a layer above whose own checks refuse a send, recv or batch before calling it (as
  // refuseCall for collectives): each message (only its peer counts; a peer that is no other
  // rank is left out) still takes its place in the order of its direction, so the message that
  // would have matched it on the peer fails there with a MismatchError naming this rank, instead
  // of matching this rank's next one (schedules/README.md, "Refused calls"). Queued behind this
  // rank's earlier sends and receives; returns at once. The calls above do this themselves for
  // the errors they raise.
  void refuseSendRecv(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs) noexcept;

  // The one entry point the collective methods share.
  WorkPtr call(const CallRequest& request);
  // Waits for every queued call.
  void drain();
  // Waits until every call on GPU memory (collectives, send/recv batches) finished on the GPU;
  // raises the first error one hit.
  void synchronize();

 private:
  std::shared_ptr<collectives::Engine> engine_;
};

}  // namespace forestcc
