// A helper thread for the generic path's independent checks (switch removal's flows into a plan's
// sinks, packing's check of the next rank's batch): the caller runs one task while the helper
// runs another, so a check pair takes the time of one on a machine with two cores. The results do
// not depend on the timing: the callers use them in the order one thread would have made them.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace forestcc::graph {

class SecondCore {
 public:
  // Without `threaded`, runBoth runs both tasks here, one after the other: for small graphs,
  // where a check takes less than handing it over (tens of microseconds), with the same results.
  explicit SecondCore(bool threaded = true) : threaded_(threaded) {}
  SecondCore(const SecondCore&) = delete;
  SecondCore& operator=(const SecondCore&) = delete;
  ~SecondCore() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  // Runs `theirs` on the helper and `mine` here; returns when both are done, rethrowing an
  // exception from either (the caller's first).
  void runBoth(const std::function<void()>& theirs, const std::function<void()>& mine) {
    if (!threaded_) {
      mine();
      theirs();
      return;
    }
    if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &theirs;
      failure_ = nullptr;
    }
    wake_.notify_all();
    std::exception_ptr mineFailed;
    try {
      mine();
    } catch (...) {
      mineFailed = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [this] { return task_ == nullptr; });
    if (mineFailed) std::rethrow_exception(mineFailed);
    if (failure_) std::rethrow_exception(failure_);
  }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || task_ != nullptr; });
      if (stop_) return;
      const std::function<void()>* task = task_;
      lock.unlock();
      std::exception_ptr failed;
      try {
        (*task)();
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      failure_ = failed;
      task_ = nullptr;
      wake_.notify_all();
    }
  }

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  const std::function<void()>* task_ = nullptr;  // the helper's task; null when it is done
  std::exception_ptr failure_;
  bool stop_ = false;
  bool threaded_;
};

}  // namespace forestcc::graph
