/* The host side of NCCL's device API (nccl_device/host.h) on the shim, compiled against NCCL's own
 * headers (C++, with the CUDA toolkit's headers; no GPU needed), run under forestcc-run:
 *   native  (no fallback NCCL): ncclCommQueryProperties says "no device API" with the rank, size,
 *           device and a hash the ranks share, writes only the fields the caller's size holds,
 *           refuses bad arguments; the teams of a communicator without a device API (world,
 *           each rank's load/store team alone, rail = world) and their rank conversions; what
 *           has no native answer (device communicators, requirements, window pointers, CFT teams)
 *           fails with ncclInvalidUsage and a message, value calls with -1 or the empty team;
 *   fallback (FORESTCC_NCCL_FALLBACK = the wheel's NCCL): a call that needs no communicator
 *           (ncclLLA2ACalcSlots) is the fallback's answer.
 * Prints "OK <mode> <rank>". */
#include <nccl.h>
#include <nccl_device/host.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "check_common.h"

static bool sameTeam(ncclTeam_t a, int nRanks, int r, int stride) {
  return a.nRanks == nRanks && a.rank == r && a.stride == stride;
}

#define EXPECT_TEAM(call, n, r, s)                                                                            \
  do {                                                                                                        \
    const ncclTeam_t t_ = (call);                                                                             \
    if (!sameTeam(t_, n, r, s))                                                                               \
      FAIL("%s gave {%d, %d, %d}, expected {%d, %d, %d}", #call, t_.nRanks, t_.rank, t_.stride, n, r, s);     \
  } while (0)

/* A value call that cannot be answered: `bad` back and `text` in ncclGetLastError. */
#define EXPECT_VALUE_ERROR(call, bad, text)                                                        \
  do {                                                                                             \
    const int v_ = (call);                                                                         \
    const char* e_ = ncclGetLastError(NULL);                                                       \
    if (v_ != (bad)) FAIL("%s gave %d, expected %d", #call, v_, (int)(bad));                       \
    else if (!strstr(e_, text)) FAIL("%s: last error '%s' does not say '%s'", #call, e_, text);    \
  } while (0)

static void properties(ncclComm_t comm) {
  ncclCommProperties_t p = NCCL_COMM_PROPERTIES_INITIALIZER;
  CHECK(ncclCommQueryProperties(comm, &p));
  int device = -2;
  CHECK(ncclCommCuDevice(comm, &device));
  if (p.rank != rank || p.nRanks != nranks) FAIL("rank %d of %d, expected %d of %d", p.rank, p.nRanks, rank, nranks);
  if (p.cudaDev != device) FAIL("cudaDev %d, ncclCommCuDevice says %d", p.cudaDev, device);
  if (p.nvmlDev != -1) FAIL("nvmlDev %d: forestcc does not know it (-1)", p.nvmlDev);
  if (p.deviceApiSupport || p.multimemSupport || p.hostRmaSupport || p.cftSupport || p.cftMulticastSupport ||
      p.cftCountedSupport)
    FAIL("a support flag is set: device API %d multimem %d host RMA %d cft %d/%d/%d", p.deviceApiSupport,
         p.multimemSupport, p.hostRmaSupport, p.cftSupport, p.cftMulticastSupport, p.cftCountedSupport);
  if (p.ginType != NCCL_GIN_TYPE_NONE || p.railedGinType != NCCL_GIN_TYPE_NONE ||
      p.ginConnectionType != NCCL_GIN_CONNECTION_NONE)
    FAIL("GIN: type %d railed %d connection %d", p.ginType, p.railedGinType, p.ginConnectionType);
  for (int i = 0; i < 64; ++i)
    if (p.ginSupport[i]) FAIL("ginSupport[%d] is set", i);
  if (p.nLsaTeams != nranks) FAIL("nLsaTeams %d, expected %d (each rank alone)", p.nLsaTeams, nranks);
  if (p.devCommRuntimeVersionSize != 0) FAIL("devCommRuntimeVersionSize %zu", p.devCommRuntimeVersionSize);
  if (p.commHash == 0) FAIL("commHash is 0");
  /* every rank's hash is the same: the smallest and the largest over the ranks agree */
  uint64_t hash[2] = {p.commHash, p.commHash};
  CHECK(ncclAllReduce(hash, hash, 1, ncclUint64, ncclMin, comm, NULL));
  CHECK(ncclAllReduce(hash + 1, hash + 1, 1, ncclUint64, ncclMax, comm, NULL));
  if (hash[0] != p.commHash || hash[1] != p.commHash) FAIL("the ranks' commHash differ");

  /* A caller built with an older header: only the fields inside its size are written. */
  unsigned char raw[sizeof(ncclCommProperties_t)];
  memset(raw, 0xab, sizeof raw);
  ncclCommProperties_t* old = reinterpret_cast<ncclCommProperties_t*>(raw);
  old->size = offsetof(ncclCommProperties_t, nvmlDev);
  old->magic = NCCL_API_MAGIC;
  old->version = NCCL_VERSION_CODE;
  CHECK(ncclCommQueryProperties(comm, old));
  if (old->rank != rank || old->nRanks != nranks || old->cudaDev != device) FAIL("the older caller's fields");
  for (size_t i = offsetof(ncclCommProperties_t, nvmlDev); i < sizeof raw; ++i)
    if (raw[i] != 0xab) {
      FAIL("byte %zu past the caller's size %zu was written", i, old->size);
      break;
    }

  ncclCommProperties_t bad = NCCL_COMM_PROPERTIES_INITIALIZER;
  bad.magic = 0;
  EXPECT_ERROR(ncclCommQueryProperties(comm, &bad), ncclInvalidArgument, "NCCL_COMM_PROPERTIES_INITIALIZER");
  EXPECT_ERROR(ncclCommQueryProperties(comm, NULL), ncclInvalidArgument, "props is NULL");
  bad = NCCL_COMM_PROPERTIES_INITIALIZER;
  bad.size = 8;
  EXPECT_ERROR(ncclCommQueryProperties(comm, &bad), ncclInvalidArgument, "too small");
  EXPECT_ERROR(ncclCommQueryProperties(NULL, &p), ncclInvalidArgument, "comm is NULL");
}

static void teams(ncclComm_t comm) {
  const ncclTeam_t world = ncclTeamWorld(comm), lsa = ncclTeamLsa(comm);
  EXPECT_TEAM(ncclTeamWorld(comm), nranks, rank, 1);
  EXPECT_TEAM(ncclTeamLsa(comm), 1, 0, 1);
  EXPECT_TEAM(ncclTeamRail(comm), nranks, rank, 1);
  for (int r = 0; r < nranks; ++r) {
    const int w = ncclTeamRankToWorld(comm, world, r);
    if (w != r) FAIL("ncclTeamRankToWorld(world, %d) = %d", r, w);
  }
  if (ncclTeamRankToWorld(comm, lsa, 0) != rank) FAIL("ncclTeamRankToWorld(lsa, 0) is not this rank");
  /* a team of every other rank (the ranks of this rank's parity): stride 2 */
  const ncclTeam_t parity = {(nranks - rank % 2 + 1) / 2, rank / 2, 2};
  for (int k = 0; k < parity.nRanks; ++k) {
    const int w = ncclTeamRankToWorld(comm, parity, k);
    if (w != rank % 2 + 2 * k) FAIL("ncclTeamRankToWorld(stride-2 team, %d) = %d, expected %d", k, w, rank % 2 + 2 * k);
  }
  if (ncclTeamRankToLsa(comm, parity, rank / 2) != 0) FAIL("ncclTeamRankToLsa(stride-2 team, this rank) is not 0");
  ncclTeam_t overflowing = {2147483647, -1, 1};
  EXPECT_VALUE_ERROR(ncclTeamRankToWorld(comm, overflowing, 0), -1, "not a team of this communicator");
  if (ncclTeamRankToLsa(comm, world, rank) != 0) FAIL("ncclTeamRankToLsa(world, this rank) is not 0");
  if (nranks > 1) EXPECT_VALUE_ERROR(ncclTeamRankToLsa(comm, world, (rank + 1) % nranks), -1, "load/store team");
  EXPECT_VALUE_ERROR(ncclTeamRankToWorld(comm, world, nranks), -1, "not a member");
  ncclTeam_t stranger = {nranks + 4, rank, 1};
  EXPECT_VALUE_ERROR(ncclTeamRankToWorld(comm, stranger, 0), -1, "not a team of this communicator");
  EXPECT_TEAM(ncclTeamCft(comm, NCCL_CFT_TEAM_FLAT), 0, 0, 0);
  if (!strstr(ncclGetLastError(NULL), "ncclTeamCft")) FAIL("ncclTeamCft: last error '%s'", ncclGetLastError(NULL));
  EXPECT_TEAM(ncclTeamCftMultimem(comm), 0, 0, 0);
  if (!strstr(ncclGetLastError(NULL), "no device API"))
    FAIL("ncclTeamCftMultimem: last error '%s'", ncclGetLastError(NULL));
  const ncclTeam_t none = ncclTeamWorld(NULL);
  if (!sameTeam(none, 0, 0, 0) || !strstr(ncclGetLastError(NULL), "comm is NULL")) FAIL("ncclTeamWorld(NULL)");
}

static void notNative(ncclComm_t comm) {
  ncclDevCommRequirements_t reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
  ncclDevComm_t devComm;
  EXPECT_ERROR(ncclDevCommCreate(comm, &reqs, &devComm), ncclInvalidUsage, "no native ncclDevCommCreate");
  ncclLsaBarrierHandle_t barrier;
  ncclDevResourceRequirements_t req;
  EXPECT_ERROR(ncclLsaBarrierCreateRequirement(ncclTeamLsa(comm), 1, &barrier, &req), ncclInvalidUsage,
               "ncclLsaBarrierCreateRequirement");
  ncclGinBarrierHandle_t gin;
  EXPECT_ERROR(ncclGinBarrierCreateRequirement(comm, ncclTeamWorld(comm), 1, &gin, &req), ncclInvalidUsage,
               "no native ncclGinBarrierCreateRequirement");
  void* ptr = NULL;
  EXPECT_ERROR(ncclGetLsaDevicePointer(NULL, 0, 0, &ptr), ncclInvalidUsage, "ncclGetLsaDevicePointer");
  EXPECT_ERROR(ncclGetPeerDevicePointer(NULL, 0, 0, &ptr), ncclInvalidUsage, "ncclGetPeerDevicePointer");
  EXPECT_VALUE_ERROR(ncclLLA2ACalcSlots(16, 8), -1, "ncclLLA2ACalcSlots");
}

int main(int argc, char** argv) {
  const char* mode = startProgram(argc, argv);
  const char* dir = argv[2];
  if (!strcmp(mode, "native")) {
    ncclComm_t comm = worldComm(dir);
    properties(comm);
    teams(comm);
    notNative(comm);
    /* the communicator still works */
    float x[3] = {1.0f, 2.0f, (float)rank};
    CHECK(ncclAllReduce(x, x, 3, ncclFloat32, ncclSum, comm, NULL));
    if (x[0] != nranks || x[2] != nranks * (nranks - 1) / 2.0f) FAIL("all_reduce after: %g %g", x[0], x[2]);
    CHECK(ncclCommDestroy(comm));
  } else if (!strcmp(mode, "fallback")) {
    const int slots = ncclLLA2ACalcSlots(1024, 16);
    if (slots <= 0) FAIL("ncclLLA2ACalcSlots through the fallback gave %d: %s", slots, ncclGetLastError(NULL));
    if (argc > 3 && slots != atoi(argv[3])) FAIL("ncclLLA2ACalcSlots gave %d, the fallback itself %s", slots, argv[3]);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  if (failures) return 1;
  printf("OK %s %d\n", mode, rank);
  return 0;
}
