/* Prints the ABI facts of whichever nccl.h it is compiled against (the wheel's or forestcc's):
 * enum values, struct sizes and field offsets, the version. test_nccl_shim.py compiles it against
 * both and requires identical output. */
#include <stddef.h>
#include <stdio.h>

#include "nccl.h"

#define V(x) printf("%s=%lld\n", #x, (long long)(x))
#define OFF(s, f) printf("offsetof(%s,%s)=%zu\n", #s, #f, offsetof(s, f))

int main(void) {
  V(NCCL_MAJOR); V(NCCL_MINOR); V(NCCL_PATCH); V(NCCL_VERSION_CODE); V(NCCL_VERSION(2, 32, 3));
  V(NCCL_UNIQUE_ID_BYTES); V(sizeof(ncclUniqueId)); V(NCCL_SPLIT_NOCOLOR); V(NCCL_API_MAGIC);
  V(NCCL_CONFIG_UNDEF_INT);
  V(ncclSuccess); V(ncclUnhandledCudaError); V(ncclSystemError); V(ncclInternalError);
  V(ncclInvalidArgument); V(ncclInvalidUsage); V(ncclRemoteError); V(ncclInProgress); V(ncclTimeout);
  V(ncclNumResults); V(sizeof(ncclResult_t));
  V(ncclInt8); V(ncclChar); V(ncclUint8); V(ncclInt32); V(ncclInt); V(ncclUint32); V(ncclInt64);
  V(ncclUint64); V(ncclFloat16); V(ncclHalf); V(ncclFloat32); V(ncclFloat); V(ncclFloat64);
  V(ncclDouble); V(ncclBfloat16); V(ncclFloat8e4m3); V(ncclFloat8e5m2); V(ncclNumTypes);
  V(sizeof(ncclDataType_t));
  V(ncclSum); V(ncclProd); V(ncclMax); V(ncclMin); V(ncclAvg); V(ncclNumOps); V(ncclMaxRedOp);
  V(sizeof(ncclRedOp_t));
  V(ncclScalarDevice); V(ncclScalarHostImmediate);
  V(ncclStatGpuMemSuspend); V(ncclStatGpuMemSuspended); V(ncclStatGpuMemPersist); V(ncclStatGpuMemTotal);
  V(NCCL_ENCRYPTION_MODE_NONE); V(NCCL_ENCRYPTION_MODE_PSK);
  V(sizeof(ncclConfig_t));
  OFF(ncclConfig_t, size); OFF(ncclConfig_t, magic); OFF(ncclConfig_t, version); OFF(ncclConfig_t, blocking);
  OFF(ncclConfig_t, cgaClusterSize); OFF(ncclConfig_t, minCTAs); OFF(ncclConfig_t, maxCTAs);
  OFF(ncclConfig_t, netName); OFF(ncclConfig_t, splitShare); OFF(ncclConfig_t, trafficClass);
  OFF(ncclConfig_t, commName); OFF(ncclConfig_t, collnetEnable); OFF(ncclConfig_t, CTAPolicy);
  OFF(ncclConfig_t, shrinkShare); OFF(ncclConfig_t, nvlsCTAs); OFF(ncclConfig_t, nChannelsPerNetPeer);
  OFF(ncclConfig_t, nvlinkCentricSched); OFF(ncclConfig_t, graphUsageMode); OFF(ncclConfig_t, numRmaCtx);
  OFF(ncclConfig_t, maxP2pPeers); OFF(ncclConfig_t, graphStreamOrdering); OFF(ncclConfig_t, launchOrderImplicit);
  OFF(ncclConfig_t, numRmaSig); OFF(ncclConfig_t, rmaEagerInit); OFF(ncclConfig_t, hostCftMode);
  OFF(ncclConfig_t, nvlsHostMode);
  V(sizeof(ncclCollConfig_t));
  OFF(ncclCollConfig_t, ext); OFF(ncclCollConfig_t, minCTAs); OFF(ncclCollConfig_t, algSelection);
  OFF(ncclCollConfig_t, forceAlgSelection); OFF(ncclCollConfig_t, CTAPolicy);
  OFF(ncclCollConfig_t, userProfilerTag); OFF(ncclCollConfig_t, launchCompletionEvent);
  V(sizeof(ncclSimInfo_t)); OFF(ncclSimInfo_t, estimatedTime);
  V(sizeof(ncclWaitSignalDesc_t)); V(sizeof(ncclEncryptionConfig_t)); OFF(ncclEncryptionConfig_t, psk);
  V(sizeof(ncclConfigExt_t)); OFF(ncclConfigExt_t, val);
  {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    V(c.size); V(c.magic); V(c.version); V(c.blocking); V(c.nvlsHostMode);
    ncclCollConfig_t cc = NCCL_COLLCONFIG_INITIALIZER;
    V(cc.size); V(cc.forceAlgSelection); V(cc.userProfilerTag);
    ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
    V(si.magic); V(si.estimatedTime);
  }
  return 0;
}
