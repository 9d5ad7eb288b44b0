// ncclCommShrink: a new communicator of the parent's ranks minus an excluded list, which may hold
// ranks that died (NCCL_SHRINK_ABORT, after a failure). The survivors renumber themselves in
// their old order, so no all-gather over the parent is needed (one through the parent's rank 0
// would wait for it, and rank 0 may be the rank that died): the lowest survivor makes the new
// id and hands it to each other survivor over the parent's bootstrap, point to point. The
// survivors must pass the same list; two rounds make sure they do before anyone joins:
//   1. the new rank 0 sends each survivor (id, its list);
//   2. each survivor answers: agreed, or how its list differs;
//   3. the new rank 0 sends each survivor the verdict: go, or the first difference.
// A survivor whose list names another new rank 0 waits for that rank instead: an error at the
// bootstrap's deadline (dead or silent rank), never a communicator of the wrong ranks.
#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "forestcc/bootstrap.hpp"
#include "nccl/comm.hpp"
#include "nccl/init.hpp"
#include "nccl/result.hpp"

using forestcc::nccl::badArgument;
using forestcc::nccl::guarded;

namespace {

constexpr uint64_t kShrinkTag = 0x4e43434c5348524bull;  // "NCCLSHRK" (+ the exchange's number with that rank)

std::string listText(const std::vector<int>& ranks) {
  std::string out = "{";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "}";
}

// The excluded ranks, sorted and without repeats (the list is a set); refuses what cannot be one.
std::vector<int> excludedRanks(const int* list, int count, const ncclComm& comm) {
  if (count < 0) badArgument("excludeRanksCount is " + std::to_string(count) + "; expected 0 or more");
  if (count > 0 && !list) badArgument("excludeRanksList is NULL but excludeRanksCount is " + std::to_string(count));
  std::set<int> ranks;
  for (int i = 0; i < count; ++i) {
    const int r = list[i];
    if (r < 0 || r >= comm.size)
      badArgument("excludeRanksList[" + std::to_string(i) + "] is " + std::to_string(r) + ": out of range (0.." +
                  std::to_string(comm.size - 1) + ")");
    if (r == comm.rank)
      badArgument("excludeRanksList[" + std::to_string(i) + "] is " + std::to_string(r) +
                  ", the calling rank: an excluded rank does not call ncclCommShrink");
    ranks.insert(r);
  }
  return {ranks.begin(), ranks.end()};
}

std::string pack(const forestcc::UniqueId& id, const std::vector<int>& excluded) {
  std::string out(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
  out.append(reinterpret_cast<const char*>(excluded.data()), excluded.size() * sizeof(int));
  return out;
}

std::vector<int> unpackList(const std::string& message) {
  std::vector<int> out((message.size() - forestcc::UniqueId::kBytes) / sizeof(int));
  std::memcpy(out.data(), message.data() + forestcc::UniqueId::kBytes, out.size() * sizeof(int));
  return out;
}

// The new communicator's id, once every survivor agreed on `excluded` (rounds 1-3 above). Throws
// ncclInvalidUsage on every survivor when any list differs. The messages with each rank are
// tagged by the number of shrink exchanges with it so far, so a later shrink never reads an
// earlier one's message.
forestcc::UniqueId agreeOnId(ncclComm& comm, const std::vector<int>& survivors, const std::vector<int>& excluded) {
  forestcc::Bootstrap& bs = comm.communicator().bootstrap();
  const int oldRank = comm.rank;
  const std::string mine = listText(excluded);
  if (survivors[0] == oldRank) {
    std::vector<uint64_t> tags(survivors.size());
    for (size_t i = 1; i < survivors.size(); ++i) tags[i] = kShrinkTag + comm.shrinkExchanges[survivors[i]]++;
    const forestcc::UniqueId id = forestcc::UniqueId::create();
    const std::string offer = pack(id, excluded);
    for (size_t i = 1; i < survivors.size(); ++i) bs.send(survivors[i], tags[i], offer);
    std::string verdict;
    for (size_t i = 1; i < survivors.size(); ++i) {
      const std::string answer = bs.recv(survivors[i], tags[i]);
      if (!answer.empty() && verdict.empty()) verdict = answer;
    }
    for (size_t i = 1; i < survivors.size(); ++i) bs.send(survivors[i], tags[i], verdict);
    if (!verdict.empty())
      throw forestcc::nccl::NcclError(ncclInvalidUsage, "the survivors passed different lists: " + verdict);
    return id;
  }
  const uint64_t tag = kShrinkTag + comm.shrinkExchanges[survivors[0]]++;
  const std::string offer = bs.recv(survivors[0], tag);
  if (offer.size() < forestcc::UniqueId::kBytes || (offer.size() - forestcc::UniqueId::kBytes) % sizeof(int))
    throw forestcc::nccl::NcclError(ncclInternalError, "a malformed shrink offer from rank " + std::to_string(survivors[0]));
  const std::string theirs = listText(unpackList(offer));
  const std::string answer =
      theirs == mine ? std::string()
                     : "rank " + std::to_string(oldRank) + " excludes " + mine + ", rank " + std::to_string(survivors[0]) +
                           " excludes " + theirs;
  bs.send(survivors[0], tag, answer);
  const std::string verdict = bs.recv(survivors[0], tag);
  if (!verdict.empty())
    throw forestcc::nccl::NcclError(ncclInvalidUsage, "the survivors passed different lists: " + verdict);
  return forestcc::UniqueId::fromBytes(offer.substr(0, forestcc::UniqueId::kBytes));
}

}  // namespace

extern "C" ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                       ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return guarded(comm, "ncclCommShrink", [&]() -> ncclResult_t {
    if (!comm) badArgument("comm is NULL");
    if (!newcomm) badArgument("newcomm is NULL");
    *newcomm = nullptr;
    if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
      badArgument("shrinkFlags is " + std::to_string(shrinkFlags) +
                  "; expected NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1)");
    const std::vector<int> excluded = excludedRanks(excludeRanksList, excludeRanksCount, *comm);
    const forestcc::nccl::CommConfig cfg = forestcc::nccl::readConfig(config, comm->config);
    // NCCL_SHRINK_ABORT ends what is still running on the parent (a call waiting for a dead rank)
    // before the shrink takes its turn; the parent is then only fit for ncclCommAbort/Destroy.
    if (shrinkFlags == NCCL_SHRINK_ABORT)
      comm->poison("ncclCommShrink with NCCL_SHRINK_ABORT on rank " + std::to_string(comm->rank));
    ncclComm::Use use(comm, "ncclCommShrink", ncclComm::Revoked::Taken);
    std::vector<int> survivors;
    for (int r = 0; r < comm->size; ++r)
      if (!std::binary_search(excluded.begin(), excluded.end(), r)) survivors.push_back(r);
    const int newRank = static_cast<int>(std::find(survivors.begin(), survivors.end(), comm->rank) - survivors.begin());
    const forestcc::UniqueId id = agreeOnId(*comm, survivors, excluded);
    return forestcc::nccl::initRank(newcomm, static_cast<int>(survivors.size()), id, newRank, cfg, comm->device);
  });
}
