// Plan files (format v1, schedules/README.md) for C++ users, the NCCL shim and the Python package:
// the one loader and structural validator of plans. Every problem is reported with the file and,
// where it applies, the rank, worker, step (op index), field and value:
//   "plan.json: rank 2, worker 0, step 5 (put): 'ch' 7 is not a channel of rank 2 (has 0..2)"
// Whether a valid plan computes its collective (no deadlock, race or wrong result) is the
// verifier's job (forestcc.plan.verify, Python).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "forestcc/error.hpp"
#include "forestcc/plan.hpp"

namespace forestcc::plan {

// Limits of format v1: beyond them a plan is refused, naming the field, before it can reach the
// executor's fixed-size records or run for hours. forestcc.plan.ops.MAX_* holds the same values
// (tests/test_plan_contract.py checks that they agree); tests pass smaller ones.
struct Limits {
  int64_t maxRanks = int64_t(1) << 16;     // nranks
  int64_t maxChunks = int64_t(1) << 22;    // chunks_per_block, each buffer's size, an op's n
  int64_t maxSlices = 1024;                // pipeline.max_slices
  int64_t maxBytes = int64_t(1) << 62;     // size_range.*, pipeline.min_slice_bytes
  int64_t maxWorkers = 256;                // workers per rank (CPU threads / GPU thread blocks)
  int64_t maxChannels = int64_t(1) << 16;  // channels per rank: an op names one in 16 bits
  int64_t maxChannelsPerPeer = 64;         // channels from one rank to one peer: the executor's
                                           // semaphore slots per peer
  int64_t maxOps = int64_t(1) << 23;       // ops in the whole plan
  int64_t maxFileBytes = int64_t(1) << 30; // a plan file's size
};

// A plan that cannot be read or is invalid: what() shows the first 20 problems, errors() has every
// one found (at most 200), each a full message naming the file.
class PlanError : public Error {
 public:
  explicit PlanError(std::vector<std::string> errors);
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<std::string> errors_;
};

// A plan file's bytes; PlanError "<path>: cannot read: ..." or "<path>: larger than N bytes ...".
std::string readPlanFile(const std::string& path, const Limits& limits = {});
// Reads, parses and validates a plan file. Throws PlanError naming the file.
Plan loadPlanFile(const std::string& path, const Limits& limits = {});
// Parses and validates plan JSON text; `source` names it in messages (a path, "<stdin>").
Plan parsePlan(const std::string& jsonText, const std::string& source, const Limits& limits = {});
// The canonical JSON text of a plan, as forestcc.plan.dumps writes it: parsePlan(toJson(p))
// gives p back. Provenance carries the generator and integer params (all a Plan holds).
std::string toJson(const Plan& plan);

}  // namespace forestcc::plan
