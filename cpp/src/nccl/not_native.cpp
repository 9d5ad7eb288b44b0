// The NCCL API forestcc has no counterpart for: exported so that programs (PyTorch imports all of
// them) load, and forwarded to the fallback NCCL with the communicator's real twin when there is
// one; otherwise ncclInvalidUsage with the reason in ncclGetLastError. A few have an honest native
// answer on host memory and give it.
#include <cstdio>
#include <exception>
#include <string>

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


extern "C" {

// With no GPU memory held, there is nothing to release or restore; the state is kept for MemStats.
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags) {
  return guarded(comm, "ncclCommSuspend", [&] {
    ncclComm::Use use(comm, "ncclCommSuspend");
    if (flags != 0 && flags != 1) badArgument("flags " + std::to_string(flags) + " is not a suspend flag");
    comm->suspended = true;
    return ncclSuccess;
  });
}

ncclResult_t ncclCommResume(ncclComm_t comm) {
  return guarded(comm, "ncclCommResume", [&] {
    ncclComm::Use use(comm, "ncclCommResume");
    comm->suspended = false;
    return ncclSuccess;
  });
}

// A host-memory communicator allocates no GPU memory: the counts are truly 0.
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  return guarded(comm, "ncclCommMemStats", [&] {
    ncclComm::Use use(comm, "ncclCommMemStats");
    if (!value) badArgument("value is NULL");
    switch (stat) {
      case ncclStatGpuMemSuspend: case ncclStatGpuMemPersist: case ncclStatGpuMemTotal: *value = 0; break;
      case ncclStatGpuMemSuspended: *value = comm->suspended ? 1 : 0; break;
      default: badArgument("stat " + std::to_string(static_cast<int>(stat)) + " is not an ncclCommMemStat_t");
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  return forwardWithComm<decltype(ncclCommWindowRegister)>("ncclCommWindowRegister", comm, buff, size, win, winFlags);
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return forwardWithComm<decltype(ncclCommWindowDeregister)>("ncclCommWindowDeregister", comm, win);
}

ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  return forwardWithComm<decltype(ncclWinGetUserPtr)>("ncclWinGetUserPtr", comm, win, outUserPtr);
}

ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
                           ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclPutSignal", [&] {
    ncclComm::Use use(comm, "ncclPutSignal");
    ncclComm_t real = nullptr;
    auto* fn = reinterpret_cast<decltype(&ncclPutSignal)>(fallbackFunction("ncclPutSignal", comm, &real));
    return fromFallback(fn(localbuff, count, datatype, peer, peerWin, peerWinOffset, sigIdx, ctx, flags, real, stream));
  });
}

ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclSignal", [&] {
    ncclComm::Use use(comm, "ncclSignal");
    ncclComm_t real = nullptr;
    auto* fn = reinterpret_cast<decltype(&ncclSignal)>(fallbackFunction("ncclSignal", comm, &real));
    return fromFallback(fn(peer, sigIdx, ctx, flags, real, stream));
  });
}

ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclWaitSignal", [&] {
    ncclComm::Use use(comm, "ncclWaitSignal");
    ncclComm_t real = nullptr;
    auto* fn = reinterpret_cast<decltype(&ncclWaitSignal)>(fallbackFunction("ncclWaitSignal", comm, &real));
    return fromFallback(fn(nDesc, signalDescs, real, stream));
  });
}

// forestcc's transports do not encrypt: plaintext is what they do, a key is refused.
ncclResult_t ncclSetEncryption(const ncclEncryptionConfig_t* config) {
  return guarded(nullptr, "ncclSetEncryption", [&] {
    if (!config) badArgument("config is NULL");
    if (config->magic != NCCL_API_MAGIC) badArgument("config was not initialised with NCCL_ENCRYPTION_CONFIG_INITIALIZER");
    if (config->mode != NCCL_ENCRYPTION_MODE_NONE)
      refuse("forestcc's transports do not encrypt; only NCCL_ENCRYPTION_MODE_NONE is accepted");
    return ncclSuccess;
  });
}

// NCCL's parameter API reads NCCL's own knobs: only the fallback has them (forestcc's are printed
// by `forestcc config`).
ncclResult_t ncclParamBind(ncclParamHandle_t* out, const char* key) {
  return forwardPlain<decltype(ncclParamBind)>("ncclParamBind", out, key);
}
#define FORESTCC_NCCL_PARAM_GET(Name, T) \
  ncclResult_t Name(ncclParamHandle_t h, T* out) { return forwardPlain<decltype(Name)>(#Name, h, out); }
FORESTCC_NCCL_PARAM_GET(ncclParamGetI8, int8_t)
FORESTCC_NCCL_PARAM_GET(ncclParamGetI16, int16_t)
FORESTCC_NCCL_PARAM_GET(ncclParamGetI32, int32_t)
FORESTCC_NCCL_PARAM_GET(ncclParamGetI64, int64_t)
FORESTCC_NCCL_PARAM_GET(ncclParamGetU8, uint8_t)
FORESTCC_NCCL_PARAM_GET(ncclParamGetU16, uint16_t)
FORESTCC_NCCL_PARAM_GET(ncclParamGetU32, uint32_t)
FORESTCC_NCCL_PARAM_GET(ncclParamGetU64, uint64_t)
FORESTCC_NCCL_PARAM_GET(ncclParamGetStr, const char*)
#undef FORESTCC_NCCL_PARAM_GET

ncclResult_t ncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len) {
  return forwardPlain<decltype(ncclParamGet)>("ncclParamGet", h, out, maxLen, len);
}

ncclResult_t ncclParamGetParameter(const char* key, const char** value, int* valueLen) {
  return forwardPlain<decltype(ncclParamGetParameter)>("ncclParamGetParameter", key, value, valueLen);
}

ncclResult_t ncclParamGetAllParameterKeys(const char*** table, int* tableLen) {
  return forwardPlain<decltype(ncclParamGetAllParameterKeys)>("ncclParamGetAllParameterKeys", table, tableLen);
}

void ncclParamDumpAll(void) {
  const ncclResult_t r = guarded(nullptr, "ncclParamDumpAll", [&] {
    reinterpret_cast<decltype(&ncclParamDumpAll)>(fallbackFunction("ncclParamDumpAll"))();
    return ncclSuccess;
  });
  if (r != ncclSuccess)
    std::fprintf(stderr, "forestcc: ncclParamDumpAll: %s (forestcc's own knobs: forestcc config)\n",
                 ncclGetLastError(nullptr));
}

// Deprecated in NCCL ("reload the environment variables of logging"). forestcc's one logging
// knob, FORESTCC_DEBUG, is read when a communicator is made, so only a fallback's logging has
// anything to reload; without one there is nothing to do or report (ncclGetLastError keeps what
// it said).
#undef ncclResetDebugInit  // nccl.h's do-nothing macro where NCCL_OS_LINUX is not defined
void ncclResetDebugInit(void);
void ncclResetDebugInit(void) {
  try {
    reinterpret_cast<void (*)(void)>(fallbackFunction("ncclResetDebugInit"))();
  } catch (const std::exception&) {
  }
}

}  // extern "C"
