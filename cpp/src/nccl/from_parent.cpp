// makeFromParent (from_parent.hpp): how the agreement of a Split, a Shrink or a Grow runs.
#include "nccl/from_parent.hpp"

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "nccl/groups.hpp"
#include "nccl/init.hpp"
#include "nccl/result.hpp"

namespace forestcc::nccl {

namespace {

// The new communicator of an agreement that runs later (ncclGroupEnd, or in the background): made
// now, so the caller holds it, and placed by the agreement before it joins.
ncclComm* pending(ncclComm* parent, const CommConfig& config) {
  std::unique_ptr<ncclComm> comm = makeComm(-1, 0, config, parent->device);
  comm->markPending();
  return comm.release();
}

// After the agreement: the pending communicator takes its place and joins (on this thread for a
// blocking config, else on its own).
ncclResult_t join(ncclComm* comm, const Place& place, const char* call) {
  comm->rank = place.rank;
  comm->size = place.size;
  return comm->start(joiner(place.id, place.rank, place.size), call);
}

}  // namespace

ncclResult_t makeFromParent(ncclComm* parent, const char* call, const CommConfig& config, bool makesOne,
                            Agreement agree, ncclComm_t* newcomm) {
  if (insideGroup()) {
    ncclComm* made = makesOne ? pending(parent, config) : nullptr;
    deferTask(parent, made, config.blocking, [agree = std::move(agree), made, call]() -> ncclResult_t {
      const std::optional<Place> place = agree();
      return place ? join(made, *place, call) : ncclSuccess;
    });
    if (newcomm) *newcomm = made;
    return ncclSuccess;
  }
  if (!parent->config.blocking && !config.blocking) {
    // The new communicator follows the parent's background call: it is in progress (and cannot
    // be freed) until the agreement is done, but its abort does not end it, and only its own
    // failures are its state.
    std::unique_ptr<ncclComm> made(makesOne ? pending(parent, config) : nullptr);
    ncclComm* child = made.get();
    std::vector<ncclComm*> followers;
    if (child) followers.push_back(child);
    const ncclResult_t r = runInBackground(
        {parent}, call,
        [agree = std::move(agree), child, call] {
          std::optional<Place> place;
          try {
            place = agree();
          } catch (const std::exception& e) {
            if (child) child->noteError(resultOf(e), std::string(call) + ": " + e.what(), true);
            throw;
          }
          if (!place) return;
          try {
            join(child, *place, call);  // non-blocking: joins on its own thread
          } catch (const std::exception& e) {  // its thread could not start: its failure, not the parent's
            child->noteError(resultOf(e), std::string(call) + ": " + e.what(), true);
          }
        },
        followers);
    if (newcomm) *newcomm = made.release();
    return r;
  }
  const std::optional<Place> place = agree();
  if (!place) return ncclSuccess;
  return initRank(newcomm, place->size, place->id, place->rank, config, parent->device, call);
}

}  // namespace forestcc::nccl
