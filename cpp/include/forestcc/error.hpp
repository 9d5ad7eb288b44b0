// Errors carry what a user needs to act: the kind of failure, which rank saw it and which peer caused it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace forestcc {

enum class ErrorCode : int {
  InvalidUsage = 1,  // bad argument from the caller (maps to ValueError in Python)
  System = 2,        // a system call failed (errno in the message)
  Remote = 3,        // a peer failed, closed its connection or died
  Timeout = 4,       // a deadline expired (a wait, a rendezvous)
  Aborted = 5,       // the communicator was poisoned by an earlier error, here or on a peer
  Internal = 6,      // a bug in forestcc
  Mismatch = 7,      // the ranks' calls disagree (collective, root, dtype, op, count or plan)
  Interrupted = 8,   // a signal the host program handles arrived while waiting (Ctrl-C)
  InvalidType = 9,   // an argument of the wrong type, e.g. mismatched dtypes (TypeError in Python)
};

const char* errorCodeName(ErrorCode code);

// Where in a collective call an error happened, as data (the message says it in words): filled
// by the executor for errors raised while a plan runs, empty elsewhere.
struct ErrorContext {
  std::string collective;  // "all_reduce", "all_to_all_v", ...; empty: not in a collective
  std::string plan;        // the plan's name
  int worker = -1;         // -1: not at a plan step (e.g. the checks at a call's end)
  int64_t step = -1;
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, int rank = -1, int peer = -1);
  ErrorCode code() const { return code_; }
  int rank() const { return rank_; }  // the rank that raised it, -1 when unknown
  int peer() const { return peer_; }  // the peer it concerns, -1 when none
  const ErrorContext& context() const { return context_; }
  Error& withContext(ErrorContext context) {
    context_ = std::move(context);
    return *this;
  }

 private:
  ErrorCode code_;
  int rank_;
  int peer_;
  ErrorContext context_;
};

// "rank R: " prefix used by every message so logs from many ranks read unambiguously.
std::string rankPrefix(int rank);
// strerror(errno) with the call name: "connect(10.0.0.2:5000): Connection refused".
[[noreturn]] void throwSystemError(const std::string& call, int err, int rank = -1, int peer = -1);

// The process-wide interrupt check of waits: set by a host program that must see its signals
// while forestcc blocks (the Python module: Ctrl-C raises KeyboardInterrupt there). Waits call
// checkInterrupt() between sleeps or polls (the bootstrap's too, so it is declared here, below
// every layer that waits); it throws (ErrorCode::Interrupted) to abandon the wait.
using InterruptCheck = void (*)();
void setInterruptCheck(InterruptCheck check);
void checkInterrupt();
// While one lives, this thread's waits skip the interrupt check: code that runs forestcc for a
// caller who knows nothing of it (the NCCL shim, loaded into a Python program that also imported
// forestcc) must not run the program's signal handlers and turn what they raise into its own
// error, which would lose the KeyboardInterrupt; the handlers run when the caller returns to
// Python, as after any native call.
class InterruptChecksOff {
 public:
  InterruptChecksOff();
  ~InterruptChecksOff();
  InterruptChecksOff(const InterruptChecksOff&) = delete;
  InterruptChecksOff& operator=(const InterruptChecksOff&) = delete;

 private:
  bool wasOff_;
};

}  // namespace forestcc
