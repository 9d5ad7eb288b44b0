#include "forestcc/collective_api.hpp"

namespace forestcc {

void Work::wait() {
  std::unique_lock<std::mutex> g(mu_);
  cv_.wait(g, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Work::completed() {
  std::lock_guard<std::mutex> g(mu_);
  return done_;
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
