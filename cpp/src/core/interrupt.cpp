// The process-wide interrupt check of waits (forestcc/error.hpp).
#include <atomic>

#include "forestcc/error.hpp"

namespace forestcc {

namespace {
std::atomic<InterruptCheck> interruptCheck{nullptr};
thread_local bool checksOff = false;
}

void setInterruptCheck(InterruptCheck check) { interruptCheck.store(check, std::memory_order_release); }

void checkInterrupt() {
  if (checksOff) return;
  if (InterruptCheck check = interruptCheck.load(std::memory_order_acquire)) check();
}

InterruptChecksOff::InterruptChecksOff() : wasOff_(checksOff) { checksOff = true; }
InterruptChecksOff::~InterruptChecksOff() { checksOff = wasOff_; }

}  // namespace forestcc
