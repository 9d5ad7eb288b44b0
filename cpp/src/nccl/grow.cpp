// ncclCommGetUniqueId and ncclCommGrow: new ranks join the ranks of an existing communicator in a
// new one, the existing ranks keeping their numbers. One existing rank, the coordinator, makes
// the id the new ranks are given (ncclCommGetUniqueId): a forestcc invitation, whose listening
// socket that process keeps. The new communicator's own id is made at the grow by the parent's
// rank 0 (its bootstrap root), which need not be the coordinator:
//   1. the existing ranks all-gather, over the parent, who passed the id and how many ranks
//      each expects, and rank 0's new id; a disagreement fails every existing rank;
//   2. the coordinator answers each new rank's connection on the invitation with that id
//      (answerInvitation), and every rank, old and new, joins it.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "forestcc/bootstrap.hpp"
#include "forestcc/config.hpp"
#include "nccl/comm.hpp"
#include "nccl/cuda_driver.hpp"
#include "nccl/from_parent.hpp"
#include "nccl/init.hpp"
#include "nccl/result.hpp"

using forestcc::nccl::badArgument;
using forestcc::nccl::guarded;

namespace {

// What each existing rank says at the grow, then (rank 0) the new communicator's id, then the
// rank's refusal of its own arguments (empty: none).
struct GrowClaim {
  int32_t nranks;
  int32_t coordinator;  // 1: passed the id of its ncclCommGetUniqueId
};

// Step 1 above: the new communicator's id; throws on every existing rank when one refused its own
// arguments (that rank ncclInvalidArgument, the others ncclInvalidUsage naming it: an argument
// error is told at the all-gather, so nobody waits for a rank that left), when they disagree on
// nRanks, or when not exactly one passed the id. Returns the coordinator's rank in `coordinator`.
forestcc::UniqueId agreeOnGrow(ncclComm& comm, int nRanks, bool mine, const std::string& refusal, int& coordinator) {
  forestcc::Bootstrap& bs = comm.communicator().bootstrap();
  const GrowClaim claim{nRanks, mine ? 1 : 0};
  std::string blob(reinterpret_cast<const char*>(&claim), sizeof claim);
  forestcc::UniqueId id;
  if (comm.rank == 0) {
    id = forestcc::UniqueId::create();
    blob.append(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
  }
  blob += refusal;
  std::vector<std::string> all;
  try {
    all = bs.allGather(blob);
  } catch (...) {
    if (comm.rank == 0) forestcc::releaseUniqueId(id);
    throw;
  }
  std::string coordinators, sizes, refusals;
  int found = 0;
  for (int r = 0; r < comm.size; ++r) {
    GrowClaim theirs;
    std::memcpy(&theirs, all[r].data(), sizeof theirs);
    const size_t textAt = sizeof theirs + (r == 0 ? forestcc::UniqueId::kBytes : 0);
    if (all[r].size() > textAt && r != comm.rank)
      refusals += (refusals.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + all[r].substr(textAt);
    if (theirs.coordinator) {
      coordinators += (found++ ? ", " : "") + std::to_string(r);
      coordinator = r;
    }
    if (theirs.nranks != nRanks)
      sizes += (sizes.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " passes " +
               std::to_string(theirs.nranks);
  }
  try {
    if (!refusal.empty()) throw forestcc::nccl::NcclError(ncclInvalidArgument, refusal);
    if (!refusals.empty())
      throw forestcc::nccl::NcclError(ncclInvalidUsage, "other existing ranks refused their arguments (" + refusals + ")");
    if (!sizes.empty())
      throw forestcc::nccl::NcclError(ncclInvalidUsage, "the existing ranks pass different nRanks: rank " +
                                                            std::to_string(comm.rank) + " passes " +
                                                            std::to_string(nRanks) + "; " + sizes);
    if (found != 1)
      throw forestcc::nccl::NcclError(
          ncclInvalidUsage, found == 0 ? std::string("no existing rank passed the id of ncclCommGetUniqueId (the "
                                                     "coordinator passes it, the other existing ranks NULL)")
                                       : "ranks " + coordinators + " passed an id; only the coordinator (the rank "
                                         "that called ncclCommGetUniqueId) passes it");
  } catch (...) {
    if (comm.rank == 0) forestcc::releaseUniqueId(id);
    throw;
  }
  if (comm.rank != 0) id = forestcc::UniqueId::fromBytes(all[0].substr(sizeof(GrowClaim), forestcc::UniqueId::kBytes));
  return id;
}

}  // namespace

extern "C" ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  return guarded(comm, "ncclCommGetUniqueId", [&] {
    ncclComm::Use use(comm, "ncclCommGetUniqueId");
    if (!uniqueId) badArgument("uniqueId is NULL");
    if (comm->growInvitation) forestcc::releaseUniqueId(*comm->growInvitation);  // replaced: never answered
    comm->growInvitation = forestcc::UniqueId::create();  // its listening socket kept for the grow
    std::memcpy(uniqueId->internal, comm->growInvitation->bytes.data(), sizeof uniqueId->internal);
    return ncclSuccess;
  });
}

extern "C" ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                                     ncclComm_t* newcomm, ncclConfig_t* config) {
  return guarded(comm, "ncclCommGrow", [&]() -> ncclResult_t {
    if (newcomm) *newcomm = nullptr;
    const double timeout = forestcc::config::timeoutSeconds();
    if (!comm) {  // a new rank
      if (!newcomm) badArgument("newcomm is NULL");
      if (!uniqueId) badArgument("uniqueId is NULL: a new rank (comm NULL) passes the id of ncclCommGetUniqueId");
      forestcc::nccl::checkRanks(nRanks, rank);
      const forestcc::UniqueId invitation = forestcc::nccl::toForestcc(*uniqueId);
      // The question waits for the existing ranks' grow, so it is asked where the communicator
      // joins: before the call returns (blocking: a refusal then leaves nothing, and the rank may
      // ask again), on its thread (non-blocking), or at ncclGroupEnd beside the others' grow.
      return forestcc::nccl::initWith(
          newcomm, nRanks, rank, forestcc::nccl::readConfig(config), forestcc::nccl::cuda::currentDevice(),
          [invitation, rank, nRanks, timeout](ncclComm& c) {
            // ncclCommAbort ends the wait for the answer, as it ends a rendezvous
            const forestcc::UniqueId job =
                forestcc::acceptInvitation(invitation, rank, nRanks, timeout, c.connectCancel().get());
            forestcc::nccl::joiner(job, rank, nRanks)(c);
          },
          "ncclCommGrow");
    }
    ncclComm::Use use(comm, "ncclCommGrow");
    // This rank's own argument errors are told to the others at the all-gather, then raised.
    std::string refusal;
    forestcc::nccl::CommConfig cfg;
    try {
      if (!newcomm) badArgument("newcomm is NULL");
      if (rank != -1)
        badArgument("rank is " + std::to_string(rank) + "; an existing rank (comm given) passes -1 and keeps its rank " +
                    std::to_string(comm->rank));
      if (nRanks <= comm->size)
        badArgument("nRanks is " + std::to_string(nRanks) + "; expected more than the communicator's " +
                    std::to_string(comm->size) + " ranks");
      if (uniqueId && (!comm->growInvitation || std::memcmp(uniqueId->internal, comm->growInvitation->bytes.data(),
                                                            sizeof uniqueId->internal)))
        badArgument("uniqueId is not the id this rank's ncclCommGetUniqueId made for this communicator (only the "
                    "coordinator passes one; the other existing ranks pass NULL)");
      cfg = forestcc::nccl::readConfig(config, comm->config);
    } catch (const forestcc::nccl::NcclError& e) {
      refusal = e.what();
    }
    const bool passesId = uniqueId != nullptr;
    // The invitation this call was checked against: inside a group, another grow of the parent or
    // an ncclCommGetUniqueId may answer or replace it before this grow's agreement runs.
    const std::optional<forestcc::UniqueId> invitation =
        passesId && refusal.empty() ? comm->growInvitation : std::optional<forestcc::UniqueId>();
    // A refusal makes no communicator (its config is the default, blocking).
    return forestcc::nccl::makeFromParent(
        comm, "ncclCommGrow", cfg, refusal.empty(),
        [comm, nRanks, passesId, refusal, timeout, invitation]() -> std::optional<forestcc::nccl::Place> {
          ncclComm::Use use(comm, "ncclCommGrow");
          forestcc::nccl::Place place;
          place.rank = comm->rank;
          place.size = nRanks;
          int coordinator = -1;
          place.id = agreeOnGrow(*comm, nRanks, passesId, refusal, coordinator);
          if (coordinator == comm->rank) {
            try {
              if (!invitation || !comm->growInvitation || comm->growInvitation->bytes != invitation->bytes)
                forestcc::nccl::refuse("the id passed to ncclCommGrow was answered by an earlier ncclCommGrow or "
                                       "replaced by ncclCommGetUniqueId before this grow ran (ncclGroupEnd)");
              comm->growInvitation.reset();  // an invitation is answered once
              // takes its socket; ncclCommAbort of the parent ends the wait for the new ranks
              forestcc::answerInvitation(*invitation, place.id, comm->size, nRanks, timeout,
                                         comm->connectCancel().get());
            } catch (...) {
              if (comm->rank == 0) forestcc::releaseUniqueId(place.id);  // never joined here
              throw;
            }
          }
          return place;
        },
        newcomm);
  });
}
