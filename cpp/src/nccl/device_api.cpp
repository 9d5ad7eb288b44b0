// The host side of NCCL's device API (nccl_device/host.h, NCCL 2.28+): device communicators, the
// device pointers of windows, teams, and the requirements of device-side barriers and queues.
// forestcc's kernels are its own, so none of it is native: each call goes to the fallback NCCL
// with the communicator's real twin (forward_call.hpp), or fails with ncclInvalidUsage and the
// reason. Two kinds of call have an honest native answer and give it without a twin:
//   - ncclCommQueryProperties: this communicator has no device API. Programs ask it before
//     ncclDevCommCreate and take their other path on deviceApiSupport == false, the answer that
//     lets them run on forestcc (PyTorch asks it too);
//   - the teams of a communicator with no device API: the world (every rank), and the load/store
//     team of each rank alone (no rank's device memory is mapped for another's kernels), so the
//     rail team (one rank of each load/store team) is the world again.
// Team calls return a value, not an ncclResult_t: one that cannot be answered records why (see
// ncclGetLastError) and returns the empty team {0, 0, 0}, which every call taking a team refuses.
// The types below are NCCL's layouts (tests/nccl/device_api_check.cpp runs against its header).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "forestcc/bootstrap.hpp"
#include "forestcc/communicator.hpp"
#include "nccl/comm.hpp"
#include "nccl/forward_call.hpp"
#include "nccl/forwarding.hpp"
#include "nccl/result.hpp"

using forestcc::nccl::badArgument;
using forestcc::nccl::fallbackFunction;
using forestcc::nccl::forwardPlain;
using forestcc::nccl::forwardWithComm;
using forestcc::nccl::fromFallback;
using forestcc::nccl::guarded;
using forestcc::nccl::refuse;

namespace {

struct Team {  // ncclTeam_t
  int nRanks, rank, stride;
};
constexpr Team kNoTeam{0, 0, 0};

constexpr int kGinTypeNone = 0;        // NCCL_GIN_TYPE_NONE
constexpr int kGinConnectionNone = 0;  // NCCL_GIN_CONNECTION_NONE
constexpr int kGinMaxTypes = 6;        // NCCL_GIN_MAX_TYPES

// ncclCommProperties_t: versioned like ncclConfig_t (size, magic, version first); a caller built
// with an older header passes a smaller size, and only the fields inside it are written.
struct CommProperties {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank;
  int nRanks;
  int cudaDev;
  int nvmlDev;
  bool deviceApiSupport;
  bool multimemSupport;
  int ginType;
  int nLsaTeams;
  bool hostRmaSupport;
  int railedGinType;
  uint64_t commHash;
  int ginMinStride;
  int ginConnectionType;
  bool ginSupport[64];
  size_t devCommRuntimeVersionSize;
  bool cftSupport;
  bool cftMulticastSupport;
  bool cftCountedSupport;
};

// The communicator's real twin, or null (a Use of comm is held).
ncclComm_t twinOf(ncclComm_t comm) { return comm->paired ? comm->paired->real : nullptr; }

// The native properties of a communicator with no device API, into the fields `p` has room for.
void nativeProperties(ncclComm_t comm, CommProperties* p) {
  if (p->size < offsetof(CommProperties, rank))
    badArgument("props: size " + std::to_string(p->size) + " is too small for an ncclCommProperties_t");
  CommProperties mine{};
  mine.rank = comm->rank;
  mine.nRanks = comm->size;
  mine.cudaDev = comm->device;
  mine.nvmlDev = -1;  // forestcc does not use NVML: unknown, not guessed from the CUDA ordinal
  mine.deviceApiSupport = false;
  mine.multimemSupport = false;
  mine.ginType = kGinTypeNone;
  mine.nLsaTeams = comm->size;  // each rank its own load/store team
  mine.hostRmaSupport = false;  // ncclPutSignal and ncclSignal only forward
  mine.railedGinType = kGinTypeNone;
  mine.commHash = comm->communicator().bootstrap().magic();  // the job's id: the same on every rank
  mine.ginMinStride = 0;
  mine.ginConnectionType = kGinConnectionNone;
  mine.devCommRuntimeVersionSize = 0;
  // Field by field, up to the caller's size (the header's fields, in order, with their padding).
  const size_t room = p->size;
  auto put = [&](size_t offset, size_t bytes) {
    if (offset + bytes <= room) std::memcpy(reinterpret_cast<char*>(p) + offset, reinterpret_cast<char*>(&mine) + offset, bytes);
  };
#define FORESTCC_PUT(field) put(offsetof(CommProperties, field), sizeof(mine.field))
  FORESTCC_PUT(rank);
  FORESTCC_PUT(nRanks);
  FORESTCC_PUT(cudaDev);
  FORESTCC_PUT(nvmlDev);
  FORESTCC_PUT(deviceApiSupport);
  FORESTCC_PUT(multimemSupport);
  FORESTCC_PUT(ginType);
  FORESTCC_PUT(nLsaTeams);
  FORESTCC_PUT(hostRmaSupport);
  FORESTCC_PUT(railedGinType);
  FORESTCC_PUT(commHash);
  FORESTCC_PUT(ginMinStride);
  FORESTCC_PUT(ginConnectionType);
  FORESTCC_PUT(ginSupport);
  FORESTCC_PUT(devCommRuntimeVersionSize);
  FORESTCC_PUT(cftSupport);
  FORESTCC_PUT(cftMulticastSupport);
  FORESTCC_PUT(cftCountedSupport);
#undef FORESTCC_PUT
  static_assert(sizeof(mine.ginSupport) >= kGinMaxTypes, "one flag per GIN type");
}

// A team call: the twin's answer to (real, args...) when there is one, else `native(comm)`,
// which throws when it has none. A failure is recorded (ncclGetLastError) and gives the empty team.
template <class Native, class... Args>
Team teamCall(const char* name, ncclComm_t comm, Native native, Args... args) {
  Team out = kNoTeam;
  guarded(comm, name, [&] {
    ncclComm::Use use(comm, name);
    if (ncclComm_t real = twinOf(comm)) {
      ncclComm_t same = nullptr;
      out = reinterpret_cast<Team (*)(ncclComm_t, Args...)>(fallbackFunction(name, comm, &same))(real, args...);
    } else {
      out = native(*comm);
    }
    return ncclSuccess;
  });
  return out;
}

Team worldTeam(const ncclComm& c) { return {c.size, c.rank, 1}; }
Team selfTeam(const ncclComm&) { return {1, 0, 1}; }
[[noreturn]] Team noFabricTeam(const ncclComm&) {
  refuse("the communicator has no device API, so no collective-fabric team (a fallback NCCL would answer)");
}

// A team handed back to the shim: one of this communicator's (the rank inside it, and every
// member a rank of the communicator).
void checkTeam(const ncclComm& c, const Team& t, const char* arg) {
  // In 64 bits: a garbage team must not overflow before it is refused.
  const long long last = c.rank + (static_cast<long long>(t.nRanks) - 1 - t.rank) * t.stride;
  const long long first = c.rank - static_cast<long long>(t.rank) * t.stride;
  if (t.nRanks < 1 || t.rank < 0 || t.rank >= t.nRanks || t.stride < 1 || first < 0 || last >= c.size)
    badArgument(std::string(arg) + " {nRanks " + std::to_string(t.nRanks) + ", rank " + std::to_string(t.rank) +
                ", stride " + std::to_string(t.stride) + "} is not a team of this communicator (rank " +
                std::to_string(c.rank) + " of " + std::to_string(c.size) + ")");
}

// A team's member as a rank: the twin's answer when there is one, else native(comm, world) with
// `world` the world rank of member `rank` of `team` (a team of this communicator: checked). A
// failure is recorded (ncclGetLastError) and gives -1.
template <class Native>
int rankCall(const char* name, ncclComm_t comm, Team team, int rank, Native native) {
  int out = -1;
  guarded(comm, name, [&] {
    ncclComm::Use use(comm, name);
    if (ncclComm_t real = twinOf(comm)) {
      ncclComm_t same = nullptr;
      out = reinterpret_cast<int (*)(ncclComm_t, Team, int)>(fallbackFunction(name, comm, &same))(real, team, rank);
      return ncclSuccess;
    }
    checkTeam(*comm, team, "team");
    if (rank < 0 || rank >= team.nRanks)
      badArgument("rank " + std::to_string(rank) + " is not a member of a team of " + std::to_string(team.nRanks));
    out = native(*comm, comm->rank + (rank - team.rank) * team.stride);
    return ncclSuccess;
  });
  return out;
}

}  // namespace

extern "C" {

ncclResult_t ncclCommQueryProperties(ncclComm_t comm, CommProperties* props) {
  return guarded(comm, "ncclCommQueryProperties", [&] {
    if (!props) badArgument("props is NULL");
    if (props->magic != NCCL_API_MAGIC)
      badArgument("props was not initialised with NCCL_COMM_PROPERTIES_INITIALIZER");
    ncclComm::Use use(comm, "ncclCommQueryProperties");
    if (ncclComm_t real = twinOf(comm)) {
      using Fn = ncclResult_t(ncclComm_t, CommProperties*);
      Fn* fn = nullptr;
      try {
        ncclComm_t same = nullptr;
        fn = reinterpret_cast<Fn*>(fallbackFunction("ncclCommQueryProperties", comm, &same));
      } catch (const forestcc::nccl::NcclError&) {
        // a fallback from before ncclCommQueryProperties (NCCL 2.29): the native answer
      }
      if (fn) return fromFallback(fn(real, props));
    }
    nativeProperties(comm, props);
    return ncclSuccess;
  });
}

// Device communicators: the requirement and device-communicator types are NCCL's own, passed
// through as pointers.
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* outDevComm) {
  using Fn = ncclResult_t(ncclComm_t, const void*, void*);
  return forwardWithComm<Fn>("ncclDevCommCreate", comm, reqs, outDevComm);
}

ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void* devComm) {
  using Fn = ncclResult_t(ncclComm_t, const void*);
  return forwardWithComm<Fn>("ncclDevCommDestroy", comm, devComm);
}

// Device pointers of windows (ncclCommWindowRegister forwards, so a window is the fallback's).
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr) {
  return forwardPlain<ncclResult_t(ncclWindow_t, size_t, void**)>("ncclGetLsaMultimemDevicePointer", window, offset,
                                                                  outPtr);
}

ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset, void* multimemBase, void** outPtr) {
  // ncclMultimemHandle_t is one pointer, passed by value
  return forwardPlain<ncclResult_t(ncclWindow_t, size_t, void*, void**)>("ncclGetMultimemDevicePointer", window,
                                                                         offset, multimemBase, outPtr);
}

ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** outPtr) {
  return forwardPlain<ncclResult_t(ncclWindow_t, size_t, int, void**)>("ncclGetLsaDevicePointer", window, offset,
                                                                       lsaRank, outPtr);
}

ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr) {
  return forwardPlain<ncclResult_t(ncclWindow_t, size_t, int, void**)>("ncclGetPeerDevicePointer", window, offset,
                                                                       peer, outPtr);
}

ncclResult_t ncclGetMultimemDeviceLeInfo(ncclWindow_t window, size_t offset, uint32_t* leId, size_t* leOffset) {
  return forwardPlain<ncclResult_t(ncclWindow_t, size_t, uint32_t*, size_t*)>("ncclGetMultimemDeviceLeInfo", window,
                                                                              offset, leId, leOffset);
}

ncclResult_t ncclGetCftDeviceLeInfo(ncclWindow_t window, size_t offset, int peerCft, Team cftTeam, uint32_t* leId,
                                    size_t* leOffset) {
  return forwardPlain<ncclResult_t(ncclWindow_t, size_t, int, Team, uint32_t*, size_t*)>(
      "ncclGetCftDeviceLeInfo", window, offset, peerCft, cftTeam, leId, leOffset);
}

ncclResult_t ncclGetPeerDeviceLeInfo(ncclWindow_t window, size_t offset, int peerWorld, uint32_t* leId,
                                     size_t* leOffset) {
  return forwardPlain<ncclResult_t(ncclWindow_t, size_t, int, uint32_t*, size_t*)>("ncclGetPeerDeviceLeInfo", window,
                                                                                   offset, peerWorld, leId, leOffset);
}

// Teams.
Team ncclTeamWorld(ncclComm_t comm) { return teamCall("ncclTeamWorld", comm, worldTeam); }
Team ncclTeamLsa(ncclComm_t comm) { return teamCall("ncclTeamLsa", comm, selfTeam); }
Team ncclTeamRail(ncclComm_t comm) { return teamCall("ncclTeamRail", comm, worldTeam); }

Team ncclTeamCft(ncclComm_t comm, int mode) { return teamCall("ncclTeamCft", comm, noFabricTeam, mode); }
Team ncclTeamCftMultimem(ncclComm_t comm) { return teamCall("ncclTeamCftMultimem", comm, noFabricTeam); }

// The world rank of member `rank` of `team` (-1, with the reason recorded, when it is none).
int ncclTeamRankToWorld(ncclComm_t comm, Team team, int rank) {
  return rankCall("ncclTeamRankToWorld", comm, team, rank, [](const ncclComm&, int world) { return world; });
}

// The load/store-team rank of `team`'s member `rank`: with no device API only this rank is in its
// load/store team, so only this rank has one (0).
int ncclTeamRankToLsa(ncclComm_t comm, Team team, int rank) {
  return rankCall("ncclTeamRankToLsa", comm, team, rank, [](const ncclComm& c, int world) {
    if (world != c.rank)
      refuse("world rank " + std::to_string(world) + " is not in rank " + std::to_string(c.rank) +
             "'s load/store team (with no device API, each rank's is itself alone)");
    return 0;
  });
}

// Requirements of device-side resources: only a device communicator (the fallback's) uses them.
ncclResult_t ncclLsaBarrierCreateRequirement(Team team, int nBarriers, void* outHandle, void* outReq) {
  return forwardPlain<ncclResult_t(Team, int, void*, void*)>("ncclLsaBarrierCreateRequirement", team, nBarriers,
                                                             outHandle, outReq);
}

ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, Team team, int nBarriers, void* outHandle, void* outReq) {
  using Fn = ncclResult_t(ncclComm_t, Team, int, void*, void*);
  return forwardWithComm<Fn>("ncclGinBarrierCreateRequirement", comm, team, nBarriers, outHandle, outReq);
}

ncclResult_t ncclCftBarrierCreateRequirement(Team team, int nBarriers, void* outHandle, void* outReq) {
  return forwardPlain<ncclResult_t(Team, int, void*, void*)>("ncclCftBarrierCreateRequirement", team, nBarriers,
                                                             outHandle, outReq);
}

ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, void* outHandle, void* outReq) {
  return forwardPlain<ncclResult_t(int, int, void*, void*)>("ncclLLA2ACreateRequirement", nBlocks, nSlots, outHandle,
                                                            outReq);
}

ncclResult_t ncclGinOutboxCreateRequirement(int nBlocks, int sizeLog2, void* outHandle, void* outReq) {
  return forwardPlain<ncclResult_t(int, int, void*, void*)>("ncclGinOutboxCreateRequirement", nBlocks, sizeLog2,
                                                            outHandle, outReq);
}

ncclResult_t ncclGinInboxA2ACreateRequirement(Team peers, int nBlocks, int sizeLog2, void* outHandle, void* outReq) {
  return forwardPlain<ncclResult_t(Team, int, int, void*, void*)>("ncclGinInboxA2ACreateRequirement", peers, nBlocks,
                                                                  sizeLog2, outHandle, outReq);
}

// The slots an LL all-to-all queue needs: NCCL's sizing rule, so the fallback's answer, or -1
// (with the reason recorded) when there is no fallback.
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  int out = -1;
  guarded(nullptr, "ncclLLA2ACalcSlots", [&] {
    out = reinterpret_cast<int (*)(int, int)>(fallbackFunction("ncclLLA2ACalcSlots"))(maxElts, maxEltSize);
    return ncclSuccess;
  });
  return out;
}

}  // extern "C"
