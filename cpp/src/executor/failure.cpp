// Where the executor's errors get their words: a plan step's name, and the message of each kind
// of interpreter failure (interpreter.hpp), with the rank, the peer, the plan, the worker and the
// step. One place, so every runner's errors read alike.
#include <sstream>

#include "executor/cpu_backend.hpp"
#include "executor/executor.hpp"
#include "forestcc/error.hpp"

namespace forestcc::executor {

namespace {

std::string stepName(const CompiledPlan& p, int worker, size_t step, const plan::Op& op, uint32_t slice) {
  std::ostringstream o;
  o << "plan '" << p.name << "' worker " << worker << " step " << step << " (" << plan::name(op.code);
  if (op.code != plan::OpCode::Copy && op.code != plan::OpCode::Reduce) o << " on channel " << op.channel;
  o << ", slice " << slice << ")";
  return o.str();
}

}  // namespace

std::string Where::describe() const {
  return plan ? stepName(*plan, worker, step, *op, slice) : std::string(text);
}

Where Executor::whereOf(const Call& call, int worker, const Failure& at) const {
  const CompiledPlan& p = *call.plan;
  return Where{&p, worker, at.step, &p.workers[worker][at.step], at.slice, ""};
}

ErrorContext Executor::contextOf(const Call& call, int worker, int64_t step) const {
  const CompiledPlan& p = *call.plan;
  return ErrorContext{call.variable ? std::string("all_to_all_v") : std::string(plan::name(p.collective)), p.name,
                      worker, step};
}

void Executor::raiseFailure(const Call& call, int worker, const Failure& f, std::exception_ptr backendError) {
  try {
    raiseFailureText(call, worker, f, backendError);
  } catch (Error& e) {
    if (e.context().plan.empty()) e.withContext(contextOf(call, worker, f.step));
    throw;
  }
}

void Executor::raiseFailureText(const Call& call, int worker, const Failure& f, std::exception_ptr backendError) {
  const CompiledPlan& p = *call.plan;
  const int rank = state_->rank;
  const std::string step = whereOf(call, worker, f).describe();
  switch (f.kind) {
    case FailureKind::Backend:
      try {
        std::rethrow_exception(backendError);
      } catch (const Error& e) {
        // Errors of waits and stamp checks name their step already (or, for a poison, the
        // report of the rank that failed first); others (a copy that failed) get it here.
        if (e.code() == ErrorCode::Timeout || e.code() == ErrorCode::Remote || e.code() == ErrorCode::Aborted ||
            e.code() == ErrorCode::Mismatch || e.code() == ErrorCode::Interrupted)
          throw;
        throw Error(e.code(), std::string(e.what()) + " [" + step + "]", e.rank(), e.peer());
      }
    case FailureKind::OutOfRange: {
      const std::string owner = f.peer < 0 || f.peer == rank ? std::string("the ") : "rank " + std::to_string(f.peer) + "'s ";
      const std::string what = f.bank ? std::string("scratch bank")
                                      : std::string(plan::name(static_cast<plan::Buffer>(f.buffer))) + " buffer";
      throw Error(ErrorCode::InvalidUsage, rankPrefix(rank) + "plan '" + p.name + "' touches bytes [" +
                                               std::to_string(f.a) + ", " + std::to_string(f.b) + ") of " + owner +
                                               what + ", which has " + std::to_string(f.c) + " bytes [" + step + "]",
                  rank, f.peer < 0 ? -1 : f.peer);
    }
    case FailureKind::SizeMismatch: {
      static const char* const kVerb[] = {"receives", "sends", "reduces"};
      const uint64_t elem = call.geometry.elem;
      throw Error(ErrorCode::Mismatch,
                  rankPrefix(rank) + "plan '" + p.name + "': " + kVerb[f.write] + " " + std::to_string(f.a / elem) +
                      " elements but rank " + std::to_string(f.peer) + "'s side has " + std::to_string(f.b / elem) +
                      " (do the ranks' counts or splits agree?) [" + step + "]",
                  rank, f.peer);
    }
    case FailureKind::UnequalChunks:
      throw Error(call.variable ? ErrorCode::Mismatch : ErrorCode::Internal,
                  rankPrefix(rank) + "plan '" + p.name + "': " + (p.workers[worker][f.step].code == plan::OpCode::Copy ? "copy" : "reduce") +
                      " of unequal chunks (" + std::to_string(f.a) + " and " + std::to_string(f.b) + " bytes)" +
                      (call.variable ? ": all_to_all_v's splits do not match the blocks the plan moves (a rank's split "
                                       "to itself must equal its split from itself; a plan's scratch_blocks must "
                                       "name the blocks its ops put there)"
                                     : "") +
                      " [" + step + "]",
                  rank);
    case FailureKind::Unsupported:
      throw Error(ErrorCode::Internal, rankPrefix(rank) + "plan '" + p.name + "': this runner cannot run this op [" +
                                           step + "]", rank);
    case FailureKind::Timeout: {
      // The CPU runner's waits raise their own error (Backend); this is the GPU runner's.
      std::ostringstream msg;
      msg << rankPrefix(rank) << step << ": timed out after " << state_->timeout << " s waiting for rank " << f.peer
          << " to signal (on the GPU; FORESTCC_TIMEOUT sets the limit)";
      throw Error(ErrorCode::Timeout, msg.str(), rank, f.peer);
    }
    case FailureKind::Aborted:
      throw Error(ErrorCode::Aborted, rankPrefix(rank) + step + ": aborted on the GPU (the host aborted the call)", rank);
    case FailureKind::None: break;
  }
  throw Error(ErrorCode::Internal, rankPrefix(rank) + "raiseFailure without a failure", rank);
}

}  // namespace forestcc::executor
