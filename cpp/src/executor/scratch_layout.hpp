// all_to_all_v through scratch: a plan's scratch_blocks say which block of data each scratch block
// holds (rank src's block for rank dst), so a call can size it from the counts the ranks publish
// when they enter (schedules/README.md, "all_to_all_v and scratch").
#pragma once

#include <string>

#include "core/state.hpp"
#include "executor/executor.hpp"
#include "forestcc/plan.hpp"

namespace forestcc::executor {

// Fills `out`'s scratch layouts (this rank's own and those of the peers whose scratch its ops
// reach) and their source ranks; refuses eager plans with scratch_blocks. Nothing for plans
// without scratch_blocks.
void compileScratchLayouts(const plan::Plan& p, Communicator::State& s, CompiledPlan& out, const std::string& prefix);

}  // namespace forestcc::executor
