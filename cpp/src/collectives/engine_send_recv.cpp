// The engine's send, recv and sendRecv: the order of point-to-point batches against each other on
// the send and receive queues (a batch itself runs in point_to_point.cpp).
#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/engine.hpp"
#include "collectives/point_to_point.hpp"
#include "core/on_error.hpp"
#include "core/state.hpp"
#include "forestcc/error.hpp"
#include "transport/cuda_ipc/ipc_event.hpp"

namespace forestcc::collectives {

void Engine::checkPeer(int peer, const char* what) const {
  auto& s = *comm_->state();
  if (peer < 0 || peer >= s.size)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + what + ": peer " + std::to_string(peer) +
                                             " is out of range (0.." + std::to_string(s.size - 1) + ")", s.rank, peer);
  if (peer == s.rank)
    throw Error(ErrorCode::InvalidUsage, rankPrefix(s.rank) + what + ": peer is this rank", s.rank, peer);
}

std::shared_ptr<Work> Engine::send(const void* data, size_t bytes, int peer, bool async, int device, void* stream) {
  checkPeer(peer, "send");
  return sendRecv({SendMessage{peer, data, bytes, device}}, {}, async, stream);
}

std::shared_ptr<Work> Engine::recv(void* data, size_t bytes, int peer, bool async, int device, void* stream) {
  checkPeer(peer, "recv");
  return sendRecv({}, {RecvMessage{peer, data, bytes, device}}, async, stream);
}

namespace {
// The place of a queued batch with both sends and receives in the receive queue: a job there
// says it was reached (every receive queued before has run) and holds the queue until the
// batch, which runs on the send queue's thread, has finished. No deadline of its own: each side
// waits only for calls that have theirs (the receives before it, the batch itself).
class ReceiveQueuePlace {
 public:
  void reach() {
    std::unique_lock<std::mutex> g(mu_);
    reached_ = true;
    cv_.notify_all();
    cv_.wait(g, [&] { return released_; });
  }
  void waitReached() {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return reached_; });
  }
  void release() {
    std::lock_guard<std::mutex> g(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool reached_ = false, released_ = false;
};
}  // namespace

// A batch of sends only runs in the send queue's order, one of receives only in the receive
// queue's; one with both in both: it holds the receive queue (its place there, reached) while it
// runs on the send queue, so every send and receive called before it has run and none called
// after it can overtake it.
std::shared_ptr<Work> Engine::sendRecv(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs, bool async,
                                       void* stream) {
  if (sends.empty() && recvs.empty()) {
    if (!async) return nullptr;
    auto work = std::make_shared<Work>();
    work->finish(nullptr);
    return work;
  }
  if (!async) {
    runBatch(std::move(sends), std::move(recvs), stream);
    return nullptr;
  }
  // GPU memory: the Work finishes once the batch ran on its queue and then on the GPU (its
  // completion, which the queued batch leaves here).
  const bool device = std::any_of(sends.begin(), sends.end(), [](const SendMessage& m) { return m.device >= 0; }) ||
                      std::any_of(recvs.begin(), recvs.end(), [](const RecvMessage& m) { return m.device >= 0; });
  auto completion = std::make_shared<std::shared_ptr<DeviceCompletion>>();
  std::shared_ptr<cuda_ipc::SharedEvent> sendEvent;
  std::shared_ptr<Work> queued;
  {
    // Refused before it is queued: its messages still take their places (PointToPoint::refuse).
    OnError refusal([&] { refuseSendRecv(sends, recvs); });
    if (device) sendEvent = p2p_->recordAtCall(sends, recvs, stream);
    queued = submitBatch(sends, recvs, stream, completion, sendEvent);
    refusal.dismiss();
  }
  if (!device) return queued;
  p2p_->track(queued);
  std::shared_ptr<Communicator::State> state = comm_->state();
  return std::make_shared<Work>([queued, completion, state](bool block) {
    if (block) {
      queued->waitInterruptibly();  // Ctrl-C ends the wait; the batch goes on
    } else if (!queued->completed()) {
      return false;
    } else {
      queued->wait();  // finished: raises its error, if any
    }
    return PointToPoint::awaitCompletion(*state, *completion, block);
  });
}

void Engine::runBatch(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs, void* stream) {
  if (recvs.empty()) {
    sends_.runInline([&] { p2p_->run(sends, {}, stream); });
  } else if (sends.empty()) {
    recvs_.runInline([&] { p2p_->run({}, recvs, stream); });
  } else {
    // Both queues drained and held; bothQueuesMu_ until then, so that no batch queued by another
    // thread meanwhile holds the receive queue while it waits for the send queue held here.
    std::unique_lock<std::mutex> order(bothQueuesMu_);
    sends_.runInline([&] {
      recvs_.runInline([&] {
        order.unlock();
        p2p_->run(sends, recvs, stream);
      });
    });
  }
}

void Engine::refuseSendRecv(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs) noexcept {
  try {
    if (sends.empty() && recvs.empty()) return;
    submitBatch(std::move(sends), std::move(recvs), nullptr, nullptr, nullptr);
  } catch (...) {
    // No memory for the job: the peers find this rank at their timeout, as they would without.
  }
}

std::shared_ptr<Work> Engine::submitBatch(std::vector<SendMessage> sends, std::vector<RecvMessage> recvs, void* stream,
                                          std::shared_ptr<std::shared_ptr<DeviceCompletion>> completion,
                                          std::shared_ptr<cuda_ipc::SharedEvent> sendEvent) {
  // A refused batch (no completion to leave) only takes its messages' places.
  auto run = [this, stream, completion, sendEvent](const std::vector<SendMessage>& sends,
                                                   const std::vector<RecvMessage>& recvs) {
    if (completion) *completion = p2p_->run(sends, recvs, stream, sendEvent.get());
    else p2p_->refuse(sends, recvs);
  };
  if (recvs.empty())
    return sends_.submit([run, sends = std::move(sends)] { run(sends, {}); });
  if (sends.empty())
    return recvs_.submit([run, recvs = std::move(recvs)] { run({}, recvs); });
  auto place = std::make_shared<ReceiveQueuePlace>();
  std::lock_guard<std::mutex> order(bothQueuesMu_);
  recvs_.submit([place] { place->reach(); });
  try {
    return sends_.submit([run, place, sends = std::move(sends), recvs = std::move(recvs)] {
      struct Release {
        ReceiveQueuePlace& place;
        ~Release() { place.release(); }
      } release{*place};
      place->waitReached();
      run(sends, recvs);
    });
  } catch (...) {
    place->release();  // not queued: its place must not hold the receive queue
    throw;
  }
}

void Engine::synchronizeSendRecv() { p2p_->synchronize(); }

}  // namespace forestcc::collectives
