// forestcc::Collectives (forestcc/collective_api.hpp): checks a call, chooses its plan and hands
// it to the engine. The path of every collective, from Python and from C++ alike.
#include <algorithm>

#include "collectives/call_checks.hpp"
#include "collectives/engine.hpp"
#include "collectives/generators.hpp"
#include "core/on_error.hpp"
#include "forestcc/error.hpp"
#include "transport/shm/shm_segment.hpp"

namespace forestcc {

using collectives::CheckedCall;
using collectives::Engine;
using executor::CompiledPlan;
using plan::Collective;

namespace {

// kSharedMemory when the call's buffers all lie in forestcc.empty memory (peers map them),
// else kPrivateMemory. A stand-in is not the user's and does not count: the root, which has
// both buffers, must come to the same kind.
int memoryKind(const CallBuffers& b, bool gpu) {
  if (gpu) return collectives::kDeviceMemory;
  size_t offset;
  auto shared = [&](const void* p, uint64_t bytes) {
    return !bytes || !p || findSharedAllocation(p, bytes, &offset) != nullptr;
  };
  return shared(b.input, b.inputBytes) && shared(b.output, b.outputBytes) ? collectives::kSharedMemory
                                                                          : collectives::kPrivateMemory;
}

const char* callName(const CallRequest& r) { return r.variable ? "all_to_all_v" : plan::name(r.collective); }

// A plan given by the caller must be for this call.
void checkGivenPlan(const CompiledPlan& p, const CallRequest& r, const CheckedCall& call, int rank) {
  auto refuse = [&](const std::string& why) {
    throw Error(ErrorCode::InvalidUsage, "algo: plan '" + p.name + "' " + why, rank);
  };
  if (p.collective != r.collective)
    refuse(std::string("is a ") + plan::name(p.collective) + " plan, not " + callName(r));
  if (p.inPlace != call.inPlace)
    refuse(std::string("is ") + (p.inPlace ? "in place" : "out of place") + " but this call is " +
           (call.inPlace ? "in place" : "out of place"));
  if (plan::rooted(r.collective) && p.root != call.root)
    refuse("is for root " + std::to_string(p.root) + ", not " + std::to_string(call.root));
}

// The plan of a call, and a reference that keeps it alive for queued calls (blocking calls of
// built-in plans need none: the engine keeps those as long as it lives).
const CompiledPlan& choosePlan(Engine& e, const CallRequest& r, const CheckedCall& call, bool gpu,
                               const std::shared_ptr<const CompiledPlan>** keep) {
  const Algorithm& algo = r.options.algorithm;
  if (algo.plan) {
    checkGivenPlan(*algo.plan, r, call, e.rank());
    *keep = &algo.plan;
    return *algo.plan;
  }
  static const std::string kAuto = "auto", kDirect = "direct", k2dh = "2dh";
  const std::string* name = &algo.name;
  if (algo.name == kAuto) {
    name = &kDirect;  // no matching rule
    // all_to_all_v: every rank must choose alike, but each knows only its own counts; the node
    // count decides (2dh across nodes: schedules/README.md, "Choosing algorithms across nodes").
    if (r.variable && e.nodes() > 1 && !gpu) name = &k2dh;
    if (!r.variable) {
      const CallBuffers& b = call.buffers;
      const std::string& tuned =
          e.choose(r.collective, std::max(b.inputBytes, b.outputBytes),
                   e.tunedByMemory() || gpu ? memoryKind(b, gpu) : collectives::kAnyMemory,
                   call.inPlace ? collectives::kInPlace : collectives::kOutOfPlace);
      if (!tuned.empty()) name = &tuned;
    }
  } else if (!collectives::isAlgorithm(algo.name)) {
    const std::shared_ptr<const CompiledPlan>& file = e.planFile(algo.name);  // a plan file's path
    checkGivenPlan(*file, r, call, e.rank());
    *keep = &file;
    return *file;
  }
  const Engine::BuiltinPlan& entry = e.builtinPlan(*name, r.collective, call.root, call.inPlace);
  *keep = &entry.plan;
  return *entry.plan;
}

}  // namespace

Collectives::Collectives(std::shared_ptr<Communicator> comm) : engine_(std::make_shared<Engine>(std::move(comm))) {
  engine_->setTuning(collectives::loadTuningTable());
}
Collectives::~Collectives() = default;

int Collectives::rank() const { return engine_->rank(); }
int Collectives::size() const { return engine_->size(); }
Communicator& Collectives::communicator() { return engine_->comm(); }
collectives::Engine& Collectives::engine() { return *engine_; }

void Collectives::refuseCall() noexcept { engine_->refuse(); }

namespace {
thread_local bool tReached = false;
}  // namespace
void Collectives::clearReached() { tReached = false; }
bool Collectives::reached() { return tReached; }

Collectives::WorkPtr Collectives::call(const CallRequest& r) {
  tReached = true;
  // An error before the engine has the call refuses it: peers that entered it raise then.
  OnError refusal([this] { refuseCall(); });
  CheckedCall call;
  collectives::checkCall(r, engine_->rank(), engine_->size(), call);
  const std::shared_ptr<const CompiledPlan>* keep = nullptr;
  // GPU memory: every buffer the rank passes (a stand-in is the engine's, of the same kind).
  const bool gpu = (r.x.present && r.x.device >= 0) || (r.out.present && r.out.device >= 0);
  if (gpu && r.x.present && r.out.present && (r.x.device >= 0) != (r.out.device >= 0))
    throw Error(ErrorCode::InvalidUsage,
                std::string(r.x.device >= 0 ? "x is GPU memory but out is host memory"
                                            : "x is host memory but out is GPU memory") +
                    ": pass both on the GPU or both on the host",
                engine_->rank());
  const CompiledPlan& p = choosePlan(*engine_, r, call, gpu, &keep);
  refusal.dismiss();  // the executor refuses what fails from here before the call's number
  if (gpu) return engine_->runOnDevice(p, call.buffers, call.standIn, r.options);
  if (!r.options.async) {
    engine_->run(p, call.buffers, call.standIn);
    return nullptr;
  }
  return engine_->submit(*keep, call.buffers, call.standIn);
}

namespace {
CallRequest request(Collective c, Tensor x, Tensor out, const CallOptions& options) {
  CallRequest r;
  r.collective = c;
  r.x = x;
  r.out = out;
  r.options = options;
  return r;
}
}  // namespace

Collectives::WorkPtr Collectives::allReduce(Tensor x, Tensor out, ReduceOp op, const CallOptions& options) {
  CallRequest r = request(Collective::AllReduce, x, out, options);
  r.op = op;
  return call(r);
}

Collectives::WorkPtr Collectives::allGather(Tensor x, Tensor out, const CallOptions& options) {
  return call(request(Collective::AllGather, x, out, options));
}

Collectives::WorkPtr Collectives::reduceScatter(Tensor x, Tensor out, ReduceOp op, const CallOptions& options) {
  CallRequest r = request(Collective::ReduceScatter, x, out, options);
  r.op = op;
  return call(r);
}

Collectives::WorkPtr Collectives::allToAll(Tensor x, Tensor out, const CallOptions& options) {
  return call(request(Collective::AllToAll, x, out, options));
}

Collectives::WorkPtr Collectives::allToAllV(Tensor x, Tensor out, std::vector<uint64_t> inSplits,
                                            std::vector<uint64_t> outSplits, const CallOptions& options) {
  CallRequest r = request(Collective::AllToAll, x, out, options);
  r.variable = true;
  r.inSplits = std::move(inSplits);
  r.outSplits = std::move(outSplits);
  return call(r);
}

Collectives::WorkPtr Collectives::broadcast(Tensor x, int64_t root, const CallOptions& options) {
  CallRequest r = request(Collective::Broadcast, x, x, options);
  r.root = root;
  return call(r);
}

Collectives::WorkPtr Collectives::reduce(Tensor x, Tensor out, int64_t root, ReduceOp op, const CallOptions& options) {
  CallRequest r = request(Collective::Reduce, x, out, options);
  r.root = root;
  r.op = op;
  return call(r);
}

Collectives::WorkPtr Collectives::gather(Tensor x, Tensor out, int64_t root, const CallOptions& options) {
  CallRequest r = request(Collective::Gather, x, out, options);
  r.root = root;
  return call(r);
}

Collectives::WorkPtr Collectives::scatter(Tensor x, Tensor out, int64_t root, const CallOptions& options) {
  CallRequest r = request(Collective::Scatter, x, out, options);
  r.root = root;
  return call(r);
}

Collectives::WorkPtr Collectives::barrier(const CallOptions& options) {
  return call(request(Collective::Barrier, Tensor::absent(), Tensor::absent(), options));
}

namespace {
// A message names a rank and, when it has bytes, their memory. `arg`: "" for send/recv's own
// arguments, "sends[2]." for a batch's.
template <class Message>
void checkMessage(const Message& m, const std::string& arg, const char* verb, int rank, int nranks) {
  collectives::checkRank(m.peer, (arg + "peer").c_str(), nranks);
  if (m.bytes && !m.data)
    throw Error(ErrorCode::InvalidUsage,
                rankPrefix(rank) + arg + "data is null with " + std::to_string(m.bytes) + " bytes to " + verb, rank);
}
}  // namespace

void Collectives::refuseSendRecv(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs) noexcept {
  engine_->refuseSendRecv(std::move(sends), std::move(recvs));
}

Collectives::WorkPtr Collectives::send(const void* data, size_t bytes, int64_t peer, bool async, int device,
                                       void* stream) {
  const SendMessage m{peer, data, bytes, device};
  {
    OnError refusal([&] { refuseSendRecv({m}, {}); });
    checkMessage(m, "", "send", rank(), size());
    refusal.dismiss();  // the batch refuses what fails from here before any peer is told
  }
  return engine_->send(data, bytes, static_cast<int>(peer), async, device, stream);
}

Collectives::WorkPtr Collectives::recv(void* data, size_t bytes, int64_t peer, bool async, int device,
                                       void* stream) {
  const RecvMessage m{peer, data, bytes, device};
  {
    OnError refusal([&] { refuseSendRecv({}, {m}); });
    checkMessage(m, "", "receive", rank(), size());
    refusal.dismiss();
  }
  return engine_->recv(data, bytes, static_cast<int>(peer), async, device, stream);
}

Collectives::WorkPtr Collectives::sendRecv(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs,
                                           bool async, void* stream) {
  {
    OnError refusal([&] { refuseSendRecv(sends, recvs); });
    for (size_t i = 0; i < sends.size(); ++i)
      checkMessage(sends[i], "sends[" + std::to_string(i) + "].", "send", rank(), size());
    for (size_t i = 0; i < recvs.size(); ++i)
      checkMessage(recvs[i], "recvs[" + std::to_string(i) + "].", "receive", rank(), size());
    collectives::checkBatchBuffers(sends, recvs, rank());
    refusal.dismiss();
  }
  return engine_->sendRecv(std::move(sends), std::move(recvs), async, stream);
}

void Collectives::drain() { engine_->drain(); }

void Collectives::synchronize() { engine_->synchronizeDevice(); }

}  // namespace forestcc
