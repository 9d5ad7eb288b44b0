#include "nccl/forwarding.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>
#include <sstream>

#include "forestcc/config.hpp"
#include "forestcc/cuda.hpp"
#include "nccl/comm.hpp"
#include "nccl/data_types.hpp"
#include "nccl/result.hpp"

namespace forestcc::nccl {

namespace {

constexpr uint64_t kPairTag = 0x4e43434c50414952ull;  // "NCCLPAIR": rank 0 sends the real id

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// FORESTCC_NCCL_FORCE: operation names (operationName, any case) or "all", comma separated; read
// once, as a bit per OpKind, since every call asks.
uint32_t forcedKinds() {
  static const uint32_t mask = [] {
    std::map<std::string, uint32_t> known{{"all", ~0u}};
    uint32_t bit = 1;
#define FORESTCC_NCCL_KNOWN(name) known[lower(#name)] = bit, bit <<= 1;
    FORESTCC_NCCL_OPERATIONS(FORESTCC_NCCL_KNOWN)
#undef FORESTCC_NCCL_KNOWN
    uint32_t out = 0;
    std::stringstream in(configString("FORESTCC_NCCL_FORCE"));
    std::string item;
    while (std::getline(in, item, ',')) {
      item.erase(std::remove_if(item.begin(), item.end(), [](unsigned char c) { return std::isspace(c); }),
                 item.end());
      if (item.empty()) continue;
      const auto it = known.find(lower(item));
      if (it == known.end()) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k.first;
        throw Error(ErrorCode::InvalidUsage,
                    "FORESTCC_NCCL_FORCE names '" + item + "', which is not one of: " + list);
      }
      out |= it->second;
    }
    return out;
  }();
  return mask;
}

bool forced(OpKind kind) { return forcedKinds() >> static_cast<unsigned>(kind) & 1u; }

// The nvidia-nccl wheel's library, found from where this shim was loaded
// (site-packages/forestcc/ -> site-packages/nvidia/nccl/lib/).
std::string wheelLibrary() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) || !info.dli_fname) return "";
  std::string self = info.dli_fname;
  const size_t slash = self.rfind('/');
  if (slash == std::string::npos) return "";
  const std::string path = self.substr(0, slash) + "/../nvidia/nccl/lib/libnccl.so.2";
  return access(path.c_str(), R_OK) == 0 ? path : "";
}

struct Library {
  void* handle = nullptr;
  std::string path;
  std::string error;  // why there is no handle
};

// Loaded on first need, once.
const Library& library() {
  static const Library lib = [] {
    Library l;
    l.path = configString("FORESTCC_NCCL_FALLBACK");
    if (l.path.empty()) l.path = wheelLibrary();
    if (l.path.empty()) {
      l.error = "no fallback NCCL: FORESTCC_NCCL_FALLBACK is not set and the nvidia-nccl-cu13 wheel's "
                "libnccl.so.2 is not installed beside forestcc";
      return l;
    }
    l.handle = dlopen(l.path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!l.handle) {
      const char* e = dlerror();
      l.error = "the fallback NCCL " + l.path + " could not be loaded: " + (e ? e : "dlopen failed");
    } else if (dlsym(l.handle, "ncclGetVersion") == reinterpret_cast<void*>(&ncclGetVersion)) {
      // The path named this shim itself: forwarding would call back into it.
      dlclose(l.handle);
      l.handle = nullptr;
      l.error = "FORESTCC_NCCL_FALLBACK (" + l.path + ") is forestcc's own shim, not an NCCL library";
    }
    return l;
  }();
  return lib;
}

template <class F>
F* symbol(const char* name) {
  const Library& l = library();
  if (!l.handle) refuse(l.error);
  void* p = dlsym(l.handle, name);
  if (!p) refuse("the fallback NCCL " + l.path + " has no " + name);
  return reinterpret_cast<F*>(p);
}

// Whether this rank wants a real communicator: a fallback to load and something to send it. A
// build with CUDA runs GPU memory natively, so it pairs only when asked (a force list, or a
// fallback named in FORESTCC_NCCL_FALLBACK): a real communicator costs GPU memory at every init,
// and the real NCCL refuses several ranks on one GPU, which the shim runs.
std::string reasonNotToPair() {
  const bool named = !configString("FORESTCC_NCCL_FALLBACK").empty();
  const bool gpuNeedsIt = !builtWithCuda() && cudaDeviceCount() > 0;
  if (forcedKinds() == 0 && !named && !gpuNeedsIt)
    return std::string("no fallback communicator: FORESTCC_NCCL_FORCE is empty, FORESTCC_NCCL_FALLBACK is not set, "
                       "and ") +
           (builtWithCuda() ? "this forestcc build runs GPU memory itself" : "no CUDA device is visible") +
           ", so the fallback NCCL was not loaded";
  return library().handle ? "" : library().error;
}

}  // namespace

PairedComm::~PairedComm() {
  if (real) {
    // Best effort at teardown: the shim communicator is going away whatever the fallback says.
    if (auto* destroy = reinterpret_cast<decltype(&ncclCommDestroy)>(dlsym(library().handle, "ncclCommDestroy")))
      destroy(real);
  }
}

void pairWithFallback(ncclComm& comm) {
  comm.paired = std::make_unique<PairedComm>();
  const std::string mine = reasonNotToPair();
  // Every rank must agree, or rank 0 would wait for a real id nobody asks for.
  auto all = comm.communicator().bootstrap().allGather(mine.empty() ? "1" : "0");
  if (!mine.empty()) {
    comm.paired->unavailable = mine;
    return;
  }
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] != "1") {
      comm.paired->unavailable = "no fallback communicator: rank " + std::to_string(r) + " has no fallback NCCL";
      return;
    }
  }
  Bootstrap& bs = comm.communicator().bootstrap();
  // Rank 0 makes the real id; a failure travels as an empty id so no rank waits forever.
  std::string id;
  if (comm.rank == 0) {
    ncclUniqueId uid;
    if (symbol<decltype(ncclGetUniqueId)>("ncclGetUniqueId")(&uid) == ncclSuccess) id.assign(uid.internal, sizeof uid);
    for (int r = 1; r < comm.size; ++r) bs.send(r, kPairTag, id);
  } else {
    id = bs.recv(0, kPairTag);
  }
  if (id.size() != sizeof(ncclUniqueId)) {
    comm.paired->unavailable = "no fallback communicator: ncclGetUniqueId of " + library().path + " failed on rank 0";
    return;
  }
  ncclUniqueId uid;
  std::copy(id.begin(), id.end(), uid.internal);
  ncclComm_t real = nullptr;
  const ncclResult_t r =
      symbol<decltype(ncclCommInitRank)>("ncclCommInitRank")(&real, comm.size, uid, comm.rank);
  if (r != ncclSuccess) {
    comm.paired->unavailable = std::string("no fallback communicator: ncclCommInitRank of ") + library().path +
                               " failed (" + ncclGetErrorString(r) + ": " + fallbackLastError() + ")";
    return;
  }
  comm.paired->real = real;
}

bool mustForward(const Operation& op, std::string* why) {
  if (op.needsFallback) {
    *why = op.needsFallback;
    return true;
  }
  if (forced(op.kind)) {
    *why = std::string("FORESTCC_NCCL_FORCE lists ") + operationName(op.kind);
    return true;
  }
  if (op.device >= 0 && !builtWithCuda()) {
    *why = "its buffers are GPU memory, and this forestcc build has no CUDA (built with FORESTCC_CUDA=OFF)";
    return true;
  }
  return false;
}

void* fallbackFunction(const char* name) { return symbol<void>(name); }

std::string fallbackLastError() {
  const char* text = symbol<decltype(ncclGetLastError)>("ncclGetLastError")(nullptr);
  return library().path + ": " + (text && *text ? text : "(no message)");
}

void* fallbackFunction(const char* name, ncclComm* comm, ncclComm_t* real) {
  if (!comm) badArgument("comm is NULL");
  if (!comm->paired || !comm->paired->real)
    refuse(std::string("forestcc has no native ") + name + ", and " +
           (comm->paired ? comm->paired->unavailable : std::string("the communicator is not initialised")));
  *real = comm->paired->real;
  return symbol<void>(name);
}

void forwardGroup(const std::vector<Operation>& ops, const Operation& trigger, const std::string& why) {
  for (const Operation& op : ops) {
    if (!op.comm->paired || !op.comm->paired->real)
      refuse(std::string("nccl") + operationName(trigger.kind) + " must run in the fallback NCCL (" + why +
             ")" + (ops.size() > 1 ? ", and so must the rest of its group, " : ", ") + "but " +
             (op.comm->paired ? op.comm->paired->unavailable : "the communicator is not initialised"));
  }
  struct MadeOp {
    ncclRedOp_t op;
    ncclComm_t comm;
  };
  std::vector<MadeOp> made;  // PreMulSum operators made in the fallback for this group
  auto realOp = [&](const Operation& op) {
    const ResolvedOp r = op.comm->redOps.resolve(op.op, op.type, "forward");
    if (!r.custom) return op.op;
    ncclRedOp_t out;
    void* scalar = r.residence == ncclScalarDevice ? const_cast<void*>(r.scalar) : const_cast<uint8_t*>(r.factor.data());
    if (symbol<decltype(ncclRedOpCreatePreMulSum)>("ncclRedOpCreatePreMulSum")(
            &out, scalar, op.type, r.residence, op.comm->paired->real) != ncclSuccess)
      refuse("the fallback NCCL refused a PreMulSum operator");
    made.push_back({out, op.comm->paired->real});
    return out;
  };
  auto check = [&](ncclResult_t r, const char* name) {
    if (r != ncclSuccess && r != ncclInProgress)
      throw NcclError(r, std::string("the fallback NCCL's ") + name + " failed: " + fallbackLastError());
  };
  check(symbol<decltype(ncclGroupStart)>("ncclGroupStart")(), "ncclGroupStart");
  for (const Operation& op : ops) {
    ncclComm_t c = op.comm->paired->real;
    ncclResult_t r = ncclSuccess;
    switch (op.kind) {
      case OpKind::AllReduce:
        r = symbol<decltype(ncclAllReduce)>("ncclAllReduce")(op.send, op.recv, op.count, op.type, realOp(op), c, op.stream);
        break;
      case OpKind::Broadcast:
        r = symbol<decltype(ncclBroadcast)>("ncclBroadcast")(op.send, op.recv, op.count, op.type, op.root, c, op.stream);
        break;
      case OpKind::Reduce:
        r = symbol<decltype(ncclReduce)>("ncclReduce")(op.send, op.recv, op.count, op.type, realOp(op), op.root, c,
                                                        op.stream);
        break;
      case OpKind::AllGather:
        r = symbol<decltype(ncclAllGather)>("ncclAllGather")(op.send, op.recv, op.count, op.type, c, op.stream);
        break;
      case OpKind::ReduceScatter:
        r = symbol<decltype(ncclReduceScatter)>("ncclReduceScatter")(op.send, op.recv, op.count, op.type, realOp(op),
                                                                      c, op.stream);
        break;
      case OpKind::AlltoAll:
        r = symbol<decltype(ncclAlltoAll)>("ncclAlltoAll")(op.send, op.recv, op.count, op.type, c, op.stream);
        break;
      case OpKind::Gather:
        r = symbol<decltype(ncclGather)>("ncclGather")(op.send, op.recv, op.count, op.type, op.root, c, op.stream);
        break;
      case OpKind::Scatter:
        r = symbol<decltype(ncclScatter)>("ncclScatter")(op.send, op.recv, op.count, op.type, op.root, c, op.stream);
        break;
      case OpKind::Send:
        r = symbol<decltype(ncclSend)>("ncclSend")(op.send, op.count, op.type, op.peer, c, op.stream);
        break;
      case OpKind::Recv:
        r = symbol<decltype(ncclRecv)>("ncclRecv")(op.recv, op.count, op.type, op.peer, c, op.stream);
        break;
    }
    check(r, operationName(op.kind));
  }
  check(symbol<decltype(ncclGroupEnd)>("ncclGroupEnd")(), "ncclGroupEnd");
  for (const MadeOp& m : made) symbol<decltype(ncclRedOpDestroy)>("ncclRedOpDestroy")(m.op, m.comm);
}

}  // namespace forestcc::nccl
