// runOnCallThread and runAtOnce (call_threads.hpp): a pool of threads that grows with what runs
// at once and shrinks when idle.
#include "nccl/call_threads.hpp"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>

namespace forestcc::nccl {

namespace {

constexpr std::chrono::seconds kIdleLife{30};

struct Pool {
  std::mutex mu;
  std::condition_variable wake;
  std::deque<std::function<void()>> jobs;  // handed to idle threads
  size_t idle = 0;                         // threads waiting for a job
};

// Never destroyed: a kept thread may still wait on it while the process exits. A child of fork()
// has none of the parent's threads (and maybe a copy of a held lock): it starts a pool of its own.
std::atomic<Pool*> current{nullptr};

Pool& pool() {
  static const bool once = [] {
    current = new Pool;
    pthread_atfork(nullptr, nullptr, [] { current = new Pool; });
    return true;
  }();
  (void)once;
  return *current.load();
}

void keptThread(std::function<void()> job) {
  Pool& p = pool();
  for (;;) {
    job();
    job = nullptr;  // its captures go before this thread waits
    std::unique_lock<std::mutex> lock(p.mu);
    ++p.idle;
    const bool got = p.wake.wait_for(lock, kIdleLife, [&] { return !p.jobs.empty(); });
    --p.idle;
    if (!got) return;
    job = std::move(p.jobs.front());
    p.jobs.pop_front();
  }
}

// Out of memory (a queue node, a thread's state, a job's std::function) is one more way of not
// starting a thread: callers handle std::system_error alone.
[[noreturn]] void noMemoryForThread() {
  throw std::system_error(std::make_error_code(std::errc::not_enough_memory), "no memory to start a call thread");
}

}  // namespace

void runOnCallThread(std::function<void()> job) {
  Pool& p = pool();
  try {  // the job has not run when this throws
    {
      std::lock_guard<std::mutex> lock(p.mu);
      // Each job handed over has an idle thread of its own to take it.
      if (p.idle > p.jobs.size()) {
        p.jobs.push_back(std::move(job));
        p.wake.notify_one();
        return;
      }
    }
    std::thread(keptThread, std::move(job)).detach();
  } catch (const std::bad_alloc&) {
    noMemoryForThread();
  }
}

void runAtOnce(size_t count, const std::function<void(size_t)>& job, size_t* started) {
  std::mutex mu;
  std::condition_variable done;
  size_t running = 0;
  auto finish = [&] {
    std::unique_lock<std::mutex> lock(mu);
    done.wait(lock, [&] { return running == 0; });
  };
  size_t i = 0;
  try {
    for (; i + 1 < count; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ++running;
      }
      try {
        runOnCallThread([&, i] {
          job(i);
          std::lock_guard<std::mutex> lock(mu);
          if (--running == 0) done.notify_all();
        });
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        --running;
        throw;
      }
    }
  } catch (...) {
    if (started) *started = i;
    finish();  // the jobs started still use this frame
    try {
      throw;
    } catch (const std::bad_alloc&) {  // building the job's std::function, before runOnCallThread
      noMemoryForThread();
    }
  }
  if (started) *started = count;
  if (count > 0) job(count - 1);
  finish();
}

}  // namespace forestcc::nccl
