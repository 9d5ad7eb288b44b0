// ncclCommShrink: a new communicator of the parent's ranks minus an excluded list, which may hold
// ranks that died (NCCL_SHRINK_ABORT, after a failure). The survivors renumber themselves in
// their old order, so no all-gather over the parent is needed (one through the parent's rank 0
// would wait for it, and rank 0 may be the rank that died): the lowest survivor makes the new
// id and hands it to each other survivor over the parent's bootstrap, point to point. The
// survivors must pass the same list; two rounds make sure they do before anyone joins:
//   1. the new rank 0 sends each survivor an offer: (id, its list);
//   2. each survivor answers: agreed, or how its list differs;
//   3. the new rank 0 sends each survivor the verdict: go, or the first difference.
// A survivor that refused its own flags or config still takes part and says so: every survivor
// fails at once. Every message carries the offer's serial (the new id's random magic) and goes on
// one tag:
// messages of an earlier shrink that failed part-way (a survivor that refused its list or never
// called, a timeout) may still be waiting in the bootstrap, and are recognised and skipped, never
// taken for this one's.
// A survivor whose list names another new rank 0 waits for that rank instead: an error at the
// bootstrap's deadline (dead or silent rank), never a communicator of the wrong ranks.
#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "forestcc/bootstrap.hpp"
#include "nccl/comm.hpp"
#include "nccl/from_parent.hpp"
#include "nccl/init.hpp"
#include "nccl/result.hpp"

using forestcc::nccl::badArgument;
using forestcc::nccl::guarded;

namespace {

constexpr uint64_t kShrinkTag = 0x4e43434c5348524bull;  // "NCCLSHRK"

// Failed: the new rank 0 could not finish the rounds (a survivor dead or silent); the body says why.
enum class Kind : char { Offer = 'O', Answer = 'A', Verdict = 'V', Failed = 'F' };

// [kind][serial][body]: an offer's body is the id then the list, an answer's and a verdict's a text
// (empty: agreed, go).
struct Message {
  Kind kind;
  uint64_t serial;
  std::string body;
};
constexpr size_t kHead = 1 + sizeof(uint64_t);

std::string encode(Kind kind, uint64_t serial, const std::string& body) {
  std::string out(kHead, '\0');
  out[0] = static_cast<char>(kind);
  std::memcpy(&out[1], &serial, sizeof serial);
  return out + body;
}

Message decode(const std::string& raw, int from) {
  if (raw.size() < kHead || (raw[0] != 'O' && raw[0] != 'A' && raw[0] != 'V' && raw[0] != 'F'))
    throw forestcc::nccl::NcclError(ncclInternalError, "a malformed shrink message from rank " + std::to_string(from));
  Message m{static_cast<Kind>(raw[0]), 0, raw.substr(kHead)};
  std::memcpy(&m.serial, raw.data() + 1, sizeof m.serial);
  return m;
}

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

std::string offerBody(const forestcc::UniqueId& id, const std::vector<int>& excluded) {
  std::string out(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
  out.append(reinterpret_cast<const char*>(excluded.data()), excluded.size() * sizeof(int));
  return out;
}

// What a survivor says of an offer of `theirs`: agreed (empty), or why not: this rank refused its
// own arguments (`refusal`), or its list differs.
std::string answerOf(int rank, int root, const std::string& refusal, const std::string& mine, const std::string& theirs) {
  if (!refusal.empty()) return "rank " + std::to_string(rank) + " refused its arguments: " + refusal;
  if (theirs == mine) return {};
  return "the survivors passed different lists: rank " + std::to_string(rank) + " excludes " + mine + ", rank " +
         std::to_string(root) + " excludes " + theirs;
}

// The verdict's failure on this rank: its own refusal is ncclInvalidArgument, anything else
// (another's refusal, lists that differ) ncclInvalidUsage.
[[noreturn]] void refuseShrink(const std::string& refusal, const std::string& verdict) {
  if (!refusal.empty()) throw forestcc::nccl::NcclError(ncclInvalidArgument, refusal);
  throw forestcc::nccl::NcclError(ncclInvalidUsage, verdict);
}

// The new communicator's id, once every survivor agreed on `excluded` (rounds 1-3 above). A
// survivor that refused its own arguments (`refusal`: not the list, which decides who takes part)
// still takes part and says so, so every survivor fails at once rather than at a deadline.
forestcc::UniqueId agreeOnId(ncclComm& comm, const std::vector<int>& survivors, const std::vector<int>& excluded,
                             const std::string& refusal) {
  forestcc::Bootstrap& bs = comm.communicator().bootstrap();
  const std::string mine = listText(excluded);
  const int root = survivors[0];
  if (root == comm.rank) {
    const forestcc::UniqueId id = forestcc::UniqueId::create();
    const uint64_t serial = id.magic();  // random and never 0, as every id's
    const std::string offer = encode(Kind::Offer, serial, offerBody(id, excluded));
    std::string verdict = answerOf(comm.rank, root, refusal, mine, mine);
    size_t answered = 1;  // survivors[1, answered) answered this offer
    try {
      for (size_t i = 1; i < survivors.size(); ++i) bs.send(survivors[i], kShrinkTag, offer);
      for (; answered < survivors.size(); ++answered) {
        for (;;) {  // an earlier shrink's leftovers are skipped
          const Message m = decode(bs.recv(survivors[answered], kShrinkTag), survivors[answered]);
          if (m.kind != Kind::Answer || m.serial != serial) continue;
          if (!m.body.empty() && verdict.empty()) verdict = m.body;
          break;
        }
      }
    } catch (const std::exception& e) {
      // A survivor that never answered (dead, silent, or its list refused): those that
      // answered hear why at once instead of waiting out their own deadline (the others may not
      // have read the offer: a message now would be one more for them to take as this shrink's);
      // the id is never joined.
      for (size_t i = 1; i < answered; ++i) {
        try {
          bs.send(survivors[i], kShrinkTag, encode(Kind::Failed, serial, e.what()));
        } catch (...) {
        }
      }
      forestcc::releaseUniqueId(id);
      throw;
    }
    for (size_t i = 1; i < survivors.size(); ++i) bs.send(survivors[i], kShrinkTag, encode(Kind::Verdict, serial, verdict));
    if (!verdict.empty()) {
      forestcc::releaseUniqueId(id);
      refuseShrink(refusal, verdict);
    }
    return id;
  }
  // Answers every offer that comes (a stale one too: its root no longer listens for the answer)
  // until the verdict of the last one answered.
  Message offer{Kind::Offer, 0, {}};
  bool waitedOnce = false;
  for (;;) {
    std::string raw;
    try {
      raw = bs.recv(root, kShrinkTag);
    } catch (const forestcc::Error& e) {
      // Having answered, wait one deadline more than the new rank 0 waits for the answers: when
      // it gives up on a survivor it says so (Failed), and that should arrive first.
      if (e.code() != forestcc::ErrorCode::Timeout || !offer.serial || waitedOnce) throw;
      waitedOnce = true;
      continue;
    }
    const Message m = decode(raw, root);
    if (m.kind == Kind::Offer) {
      if (m.body.size() < forestcc::UniqueId::kBytes || (m.body.size() - forestcc::UniqueId::kBytes) % sizeof(int))
        throw forestcc::nccl::NcclError(ncclInternalError, "a malformed shrink offer from rank " + std::to_string(root));
      std::vector<int> theirs((m.body.size() - forestcc::UniqueId::kBytes) / sizeof(int));
      std::memcpy(theirs.data(), m.body.data() + forestcc::UniqueId::kBytes, theirs.size() * sizeof(int));
      bs.send(root, kShrinkTag, encode(Kind::Answer, m.serial, answerOf(comm.rank, root, refusal, mine, listText(theirs))));
      offer = m;
    } else if (m.kind == Kind::Failed && offer.serial && m.serial == offer.serial) {
      throw forestcc::nccl::NcclError(ncclRemoteError, "the new rank 0 (rank " + std::to_string(root) +
                                                           ") could not finish the shrink: " + m.body);
    } else if (m.kind == Kind::Verdict && offer.serial && m.serial == offer.serial) {
      if (!m.body.empty()) refuseShrink(refusal, m.body);
      return forestcc::UniqueId::fromBytes(offer.body.substr(0, forestcc::UniqueId::kBytes));
    }
  }
}

}  // namespace

extern "C" ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                       ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return guarded(comm, "ncclCommShrink", [&]() -> ncclResult_t {
    if (!comm) badArgument("comm is NULL");
    if (!newcomm) badArgument("newcomm is NULL");
    *newcomm = nullptr;
    // The list decides who takes part, so a wrong one is refused here alone; the flags and the
    // config are refused at the agreement, which tells the other survivors at once.
    const std::vector<int> excluded = excludedRanks(excludeRanksList, excludeRanksCount, *comm);
    std::string refusal;
    forestcc::nccl::CommConfig cfg;
    try {
      if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
        badArgument("shrinkFlags is " + std::to_string(shrinkFlags) +
                    "; expected NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1)");
      cfg = forestcc::nccl::readConfig(config, comm->config);
    } catch (const forestcc::nccl::NcclError& e) {
      refusal = e.what();
    }
    // NCCL_SHRINK_ABORT ends what is still running on the parent (a call waiting for a dead rank)
    // before the shrink takes its turn; the parent is then only fit for ncclCommAbort/Destroy.
    if (shrinkFlags == NCCL_SHRINK_ABORT && refusal.empty())
      comm->poison("ncclCommShrink with NCCL_SHRINK_ABORT on rank " + std::to_string(comm->rank));
    ncclComm::Use use(comm, "ncclCommShrink", ncclComm::Revoked::Taken);
    std::vector<int> survivors;
    for (int r = 0; r < comm->size; ++r)
      if (!std::binary_search(excluded.begin(), excluded.end(), r)) survivors.push_back(r);
    const int newRank = static_cast<int>(std::find(survivors.begin(), survivors.end(), comm->rank) - survivors.begin());
    // A refusal makes no communicator (its config is the default, blocking: refused before the
    // call returns, or at ncclGroupEnd inside a group).
    return forestcc::nccl::makeFromParent(
        comm, "ncclCommShrink", cfg, refusal.empty(),
        [comm, survivors, excluded, refusal, newRank]() -> std::optional<forestcc::nccl::Place> {
          ncclComm::Use use(comm, "ncclCommShrink", ncclComm::Revoked::Taken);
          forestcc::nccl::Place place;
          place.rank = newRank;
          place.size = static_cast<int>(survivors.size());
          place.id = agreeOnId(*comm, survivors, excluded, refusal);
          return place;
        },
        newcomm);
  });
}
