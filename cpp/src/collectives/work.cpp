#include "forestcc/collective_api.hpp"

namespace forestcc {

void Work::wait() {
  if (poll_ && !completed()) {
    std::exception_ptr error;
    try {
      poll_(true);
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
    } catch (...) {
      // kept for wait()
    }
    return true;
  }
  std::unique_lock<std::mutex> g(mu_);
  return cv_.wait_for(g, limit, [&] { return done_; });
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
