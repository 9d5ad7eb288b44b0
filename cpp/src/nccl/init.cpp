// Making communicators: ncclGetVersion, ncclGetUniqueId, ncclCommInitRank / InitRankConfig /
// InitRankScalable / InitAll, ncclCommSplit. An ncclUniqueId carries forestcc's bootstrap id (both
// are 128 bytes), so rank 0's ncclGetUniqueId, a broadcast by the program and ncclCommInitRank on
// every rank join a forestcc job as NCCL programs expect.
#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "forestcc/bootstrap.hpp"
#include "forestcc/communicator.hpp"
#include "forestcc/config.hpp"
#include "forestcc/cuda.hpp"
#include "nccl/comm.hpp"
#include "nccl/cuda_driver.hpp"
#include "nccl/from_parent.hpp"
#include "nccl/groups.hpp"
#include "nccl/init.hpp"
#include "nccl/result.hpp"

using forestcc::nccl::badArgument;
using forestcc::nccl::checkRanks;
using forestcc::nccl::guarded;
using forestcc::nccl::initRank;
using forestcc::nccl::refuse;
using forestcc::nccl::toForestcc;

static_assert(sizeof(ncclUniqueId) == forestcc::UniqueId::kBytes, "an ncclUniqueId holds a forestcc UniqueId");

namespace {

constexpr uint64_t kSplitTag = 0x4e43434c53504c54ull;  // "NCCLSPLT" (+ the split's number)

}  // namespace

namespace forestcc::nccl {

void checkRanks(int nranks, int rank) {
  if (nranks < 1) badArgument("nranks is " + std::to_string(nranks) + "; expected at least 1");
  if (rank < 0 || rank >= nranks)
    badArgument("rank " + std::to_string(rank) + " is out of range (0.." + std::to_string(nranks - 1) + ")");
}

forestcc::UniqueId toForestcc(const ncclUniqueId& id) {
  return forestcc::UniqueId::fromBytes(std::string(id.internal, sizeof id.internal));
}

std::unique_ptr<ncclComm> makeComm(int rank, int nranks, const CommConfig& config, int device) {
  forestcc::nccl::cuda::lookForTheDriver();  // CUDA loaded since the last init: GPU pointers are seen
  auto comm = std::make_unique<ncclComm>(rank, nranks, config);
  comm->device = device;
  // The GPU kernels loaded now, not at the first launch: that load waits for the context's queued
  // work, which may be a stream the program holds until this rank's call returns (async-error).
  if (device >= 0 && forestcc::nccl::cuda::runtimeCanStart()) forestcc::cudaLoadKernels(device);
  return comm;
}

std::function<void(ncclComm&)> joiner(const forestcc::UniqueId& id, int rank, int nranks) {
  return [nranks, id, rank](ncclComm& c) {
    auto bootstrap = std::make_unique<forestcc::Bootstrap>(rank, nranks, id, forestcc::config::timeoutSeconds(), -1, 0,
                                                           c.connectCancel());
    c.attach(std::make_shared<forestcc::Communicator>(std::move(bootstrap)));
  };
}

ncclResult_t initRank(ncclComm_t* out, int nranks, const forestcc::UniqueId& id, int rank, const CommConfig& config,
                      int device, const char* call) {
  return initWith(out, nranks, rank, config, device, joiner(id, rank, nranks), call);
}

ncclResult_t initWith(ncclComm_t* out, int nranks, int rank, const CommConfig& config, int device,
                      std::function<void(ncclComm&)> connect, const char* call) {
  std::unique_ptr<ncclComm> comm = makeComm(rank, nranks, config, device);
  if (forestcc::nccl::insideGroup()) {
    // NCCL's single-thread multi-rank init: the ranks of this thread join at ncclGroupEnd, together.
    comm->defer(std::move(connect), call);
    *out = comm.release();
    forestcc::nccl::deferInit(*out);
    return ncclSuccess;
  }
  const ncclResult_t result = comm->start(std::move(connect), call);
  if (result != ncclSuccess && result != ncclInProgress) return result;  // the error is recorded
  *out = comm.release();
  return result;
}

}  // namespace forestcc::nccl

extern "C" ncclResult_t ncclGetVersion(int* version) {
  return guarded(nullptr, "ncclGetVersion", [&] {
    if (!version) badArgument("version is NULL");
    *version = NCCL_VERSION_CODE;  // the ABI emulated decides what callers exercise, not forestcc's version
    return ncclSuccess;
  });
}

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return guarded(nullptr, "ncclGetUniqueId", [&] {
    if (!uniqueId) badArgument("uniqueId is NULL");
    const forestcc::UniqueId id = forestcc::UniqueId::create();
    std::memcpy(uniqueId->internal, id.bytes.data(), sizeof uniqueId->internal);
    return ncclSuccess;
  });
}

extern "C" ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                               ncclConfig_t* config) {
  return guarded(nullptr, "ncclCommInitRankConfig", [&] {
    if (!comm) badArgument("comm is NULL");
    *comm = nullptr;
    checkRanks(nranks, rank);
    return initRank(comm, nranks, toForestcc(commId), rank, forestcc::nccl::readConfig(config),
                    forestcc::nccl::cuda::currentDevice());
  });
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

extern "C" ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                 ncclUniqueId* commIds, ncclConfig_t* config) {
  return guarded(nullptr, "ncclCommInitRankScalable", [&] {
    if (nId < 1 || !commIds) badArgument("expected at least one unique id in commIds (nId is " + std::to_string(nId) + ")");
    // Every rank holds the same list; forestcc's bootstrap needs only its first id.
    return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
  });
}

extern "C" ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return guarded(nullptr, "ncclCommInitAll", [&] {
    if (!comms) badArgument("comm is NULL");
    if (ndev < 1) badArgument("ndev is " + std::to_string(ndev) + "; expected at least 1");
    const forestcc::UniqueId id = forestcc::UniqueId::create();
    std::vector<ncclResult_t> results(ndev, ncclSuccess);
    std::vector<std::thread> threads;
    // Every rank of this process joins at once: each init waits for all of them.
    for (int i = 0; i < ndev; ++i) {
      threads.emplace_back([&, i] {
        results[i] = initRank(&comms[i], ndev, id, i, {}, devlist ? devlist[i] : i);
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < ndev; ++i) {
      if (results[i] != ncclSuccess) {
        for (int j = 0; j < ndev; ++j) {
          if (results[j] == ncclSuccess) delete comms[j];
          comms[j] = nullptr;
        }
        return results[i];
      }
    }
    return ncclSuccess;
  });
}

namespace {

// The split's agreement over the parent: an all-gather of every rank's (color, key), new ranks by
// key then old rank, and the new rank 0's id sent to the others over the parent's bootstrap.
// Nowhere for NCCL_SPLIT_NOCOLOR (which takes part in the all-gather only).
std::optional<forestcc::nccl::Place> agreeOnSplit(ncclComm* parent, int color, int key, uint64_t tag) {
  ncclComm::Use use(parent, "ncclCommSplit", ncclComm::Revoked::Taken);
  forestcc::Bootstrap& bs = parent->communicator().bootstrap();
  int mine[2] = {color, key};
  auto all = bs.allGather(std::string(reinterpret_cast<const char*>(mine), sizeof mine));
  if (color == NCCL_SPLIT_NOCOLOR) return std::nullopt;
  std::vector<std::pair<int, int>> members;  // (key, old rank)
  for (int r = 0; r < parent->size; ++r) {
    int theirs[2];
    std::memcpy(theirs, all[r].data(), sizeof theirs);
    if (theirs[0] == color) members.push_back({theirs[1], r});
  }
  std::sort(members.begin(), members.end());
  forestcc::nccl::Place place;
  place.size = static_cast<int>(members.size());
  place.rank = 0;
  while (members[place.rank].second != parent->rank) ++place.rank;
  if (place.rank == 0) {
    place.id = forestcc::UniqueId::create();
    const std::string bytes(reinterpret_cast<const char*>(place.id.bytes.data()), place.id.bytes.size());
    for (size_t i = 1; i < members.size(); ++i) bs.send(members[i].second, tag, bytes);
  } else {
    place.id = forestcc::UniqueId::fromBytes(bs.recv(members[0].second, tag));
  }
  return place;
}

}  // namespace

// The agreement runs at once, at ncclGroupEnd or in the background (from_parent.hpp).
extern "C" ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                      ncclConfig_t* config) {
  return guarded(comm, "ncclCommSplit", [&]() -> ncclResult_t {
    ncclComm::Use use(comm, "ncclCommSplit", ncclComm::Revoked::Taken);
    if (!newcomm) badArgument("newcomm is NULL");
    *newcomm = nullptr;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
      badArgument("color " + std::to_string(color) + " is negative (only NCCL_SPLIT_NOCOLOR may be)");
    const forestcc::nccl::CommConfig cfg = forestcc::nccl::readConfig(config, comm->config);
    const uint64_t tag = kSplitTag + comm->splits++;
    return forestcc::nccl::makeFromParent(
        comm, "ncclCommSplit", cfg, color != NCCL_SPLIT_NOCOLOR,
        [comm, color, key, tag] { return agreeOnSplit(comm, color, key, tag); }, newcomm);
  });
}
