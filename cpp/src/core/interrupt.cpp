// The process-wide interrupt check of waits (forestcc/error.hpp).
#include <atomic>

#include "forestcc/error.hpp"

namespace forestcc {

namespace {
std::atomic<InterruptCheck> interruptCheck{nullptr};
}

void setInterruptCheck(InterruptCheck check) { interruptCheck.store(check, std::memory_order_release); }

void checkInterrupt() {
  if (InterruptCheck check = interruptCheck.load(std::memory_order_acquire)) check();
}

}  // namespace forestcc
