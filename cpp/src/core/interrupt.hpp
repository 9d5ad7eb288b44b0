// The process-wide interrupt check of waits: set by a host program that must see its signals
// while forestcc blocks (the Python module: Ctrl-C raises KeyboardInterrupt there). Waits call
// checkInterrupt() between sleeps or polls; it throws (ErrorCode::Interrupted) to abandon the
// wait. A layer of its own, below the bootstrap and the waits on shared memory (core/wait.hpp).
#pragma once

namespace forestcc {

using InterruptCheck = void (*)();
void setInterruptCheck(InterruptCheck check);
void checkInterrupt();

}  // namespace forestcc
