#include "forestcc/collective_api.hpp"

#include "forestcc/error.hpp"

namespace forestcc {

void Work::wait() {
  if (poll_ && !completed()) {
    std::exception_ptr error;
    try {
      poll_(true);
    } catch (const Error& e) {
      // Ctrl-C ends the wait, not the call, which the GPU still runs: a later wait waits again
      // (and its arrays stay kept meanwhile).
      if (e.code() == ErrorCode::Interrupted) throw;
      error = std::current_exception();
    } catch (...) {
      error = std::current_exception();
    }
    finish(error);
  }
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait(g, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Work::waitFor(std::chrono::milliseconds limit) {
  if (poll_) {
    try {
      wait();
    } catch (const Error& e) {
      if (e.code() == ErrorCode::Interrupted) throw;  // the call goes on
      // the call's own error: kept for wait()
    } catch (...) {
      // the call's own error: kept for wait()
    }
    return true;
  }
  std::unique_lock<std::mutex> g(mu_);
  return cv_.wait_for(g, limit, [&] { return done_; });
}

void Work::waitInterruptibly() {
  while (!waitFor(std::chrono::milliseconds(50))) checkInterrupt();
  wait();
}

bool Work::completed() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (done_ || !poll_) return done_;
  }
  std::exception_ptr error;
  try {
    if (!poll_(false)) return false;
  } catch (...) {
    error = std::current_exception();
  }
  finish(error);
  return true;
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> g(mu_);
    done_ = true;
    error_ = error;
  }
  cv_.notify_all();
}

}  // namespace forestcc
