// Whole-plan checks made once when a plan is compiled, for built-in plans and plan files alike:
// cheap (one pass over every rank's ops), so they run in every build whatever the plan's size.
#pragma once

#include <cstdint>

#include "forestcc/plan.hpp"

namespace forestcc::executor {

// A hash of everything that decides what a plan does (not its name or provenance): ranks that
// call with equal hashes run the same program, so their calls can be compared by this number.
uint64_t planHash(const plan::Plan& p);

// Every channel pair balances its signals: on each channel, the signals one end sends per call
// equal the waits the other end makes on its side. Otherwise a call leaves a signal behind (or
// waits for one that never comes) and a later call would consume it as its own. Throws
// InvalidUsage naming the plan, both ranks, the channels and the counts. `rank` is the caller's
// (for the message).
void checkSignalBalance(const plan::Plan& p, int rank);

}  // namespace forestcc::executor
