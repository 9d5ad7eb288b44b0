// OnError: runs a function when an exception leaves its scope, unless dismissed first. For work
// that must follow any error of a stretch of code, whichever statement throws (a call refused
// before it took its number: Executor::refuseCall). It runs while that exception unwinds, so
// whatever it throws itself (no memory for its arguments) is dropped: the first error stands.
#pragma once

#include <exception>
#include <utility>

namespace forestcc {

template <class F>
class OnError {
 public:
  explicit OnError(F f) : f_(std::move(f)) {}
  OnError(const OnError&) = delete;
  OnError& operator=(const OnError&) = delete;
  ~OnError() {
    if (armed_ && std::uncaught_exceptions() > uncaught_) {
      try {
        f_();
      } catch (...) {
      }
    }
  }
  void dismiss() { armed_ = false; }

 private:
  F f_;
  int uncaught_ = std::uncaught_exceptions();
  bool armed_ = true;
};

}  // namespace forestcc
