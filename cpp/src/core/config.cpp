#include "forestcc/config.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "forestcc/error.hpp"

namespace forestcc {

const std::vector<ConfigEntry>& configTable() {
  static const std::vector<ConfigEntry> table = {
      {"FORESTCC_TIMEOUT", "float", "300",
       "Seconds before any wait, receive or rendezvous gives up with an error naming the peer "
       "(inf and anything over 1e9 mean 1e9, about 31 years)."},
      {"FORESTCC_DEBUG", "bool", "0",
       "Adds each local rank's call (collective, count, dtype, op, root, plan) to the message of a "
       "mismatch between ranks (the check itself runs always), and prints bootstrap diagnostics."},
      {"FORESTCC_NODE_ID", "string", "",
       "Overrides the hostname as the node identity: ranks with the same id share memory."},
      {"FORESTCC_RDZV_DIR", "string", "/tmp",
       "Directory for the file rendezvous used under mpirun/srun on one node without an address."},
      {"FORESTCC_SHM_PREFIX", "string", "fcc",
       "Prefix of POSIX shared-memory names (/dev/shm/<prefix>-<pid>-...): 1 to 40 letters, digits, "
       "'_' or '.'. Jobs with different prefixes never sweep each other's segments."},
      {"FORESTCC_SPIN_US", "float", "auto",
       "Microseconds a wait busy-polls before it yields the core and then sleeps; auto: 50, or 1 "
       "when the ranks on this node outnumber the CPUs they may run on (their affinity masks: "
       "taskset, cpusets, launcher binding), since a spinning rank would hold the CPU the rank it "
       "waits for needs."},
      {"FORESTCC_YIELD_US", "float", "20",
       "Microseconds a wait yields the core after its spin, before it sleeps until a signal rings "
       "its rank's doorbell. Short, because a yielding rank stays runnable: when the node's CPUs "
       "are busy (more ranks than CPUs, or other jobs) it takes CPU time the rank it waits for "
       "needs; a sleeping one does not, and the doorbell wakes it when the signal lands."},
      {"FORESTCC_STREAMING_BYTES", "float", "50331648",
       "Collectives whose data on this node (every local rank's input and output; one buffer in "
       "place) reaches this many bytes copy with streaming (non-temporal) stores, which skip the "
       "cache: faster once the data no longer fits in it (default: 1.5x a 32 MiB L3)."},
      {"FORESTCC_CPU_ISA", "string", "auto",
       "Instruction set of the CPU reductions: auto (the best this CPU runs), v2 (SSE4.2), avx2 "
       "(AVX2, FMA, F16C) or avx512 (AVX-512 F/BW/DQ/VL). Every level gives the same bits; a level "
       "the CPU lacks is an error when a communicator is created."},
      {"FORESTCC_HUGE_PAGE_BYTES", "float", "4194304",
       "Private buffers (not forestcc.empty) of at least this many bytes that calls use again are "
       "moved onto 2 MiB pages (madvise MADV_COLLAPSE, Linux 6.1 and later; once per buffer, on "
       "its second use): peers copy private memory with cross-process calls, which pin every page "
       "they touch. 0: never."},
      {"FORESTCC_PACKETS", "string", "auto",
       "Eager plans (algo eager) move their data as low-latency packets when the plan qualifies and the "
       "call's packets fit the packet bank: every 8 bytes travel with the call's flag in one 16-byte store, and "
       "the receiver polls the flags instead of waiting for a signal after the data. on, off, or auto "
       "(GPU memory: on; host memory: off). Every rank must use the same value (call stamps compare it)."},
      {"FORESTCC_TUNING", "string", "",
       "Tuning table algo=\"auto\" reads (a JSON file from forestcc-perf --tune); empty: "
       "$XDG_CONFIG_HOME/forestcc/tuning.json when it exists, else the table shipped with forestcc."},
      {"FORESTCC_TRANSPORT", "string", "auto",
       "How ranks reach each other: auto (shared memory and cross-process copies on one node, tcp "
       "between nodes), or a comma-separated list of transports to use between any two ranks "
       "(shm, cma, tcp), tried in that order; tcp alone runs a one-node job over sockets (tests). "
       "Every rank must set the same."},
      {"FORESTCC_TCP_STREAMS", "int", "2",
       "Sockets per pair of ranks on different nodes (1 to 16); puts of 64 KiB or more are cut "
       "into pieces spread over them."},
      {"FORESTCC_SOCKET_IFNAME", "string", "",
       "Interfaces the tcp transport listens on: name prefixes (eth,ib), '=' for exact names "
       "(=eth0), '^' to exclude (^docker,lo); empty: the one that routes to rank 0's address. "
       "A value that selects no interface is an error at init listing the interfaces there are."},
      {"FORESTCC_ROOT_ADDR", "string", "",
       "host:port where rank 0 listens for the rendezvous (set by forestcc-run; settable by hand)."},
      {"FORESTCC_NCCL_FALLBACK", "string", "",
       "The NCCL shim (libnccl.so.2 from forestcc): path of a real libnccl.so.2 for what forestcc "
       "does not run natively (GPU buffers, NCCL-only APIs, FORESTCC_NCCL_FORCE); empty: the "
       "nvidia-nccl wheel's library beside forestcc when it is installed."},
      {"FORESTCC_NCCL_FORCE", "string", "",
       "The NCCL shim: operations always run in the fallback NCCL, comma separated (AllReduce, "
       "Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather, Scatter, Send, Recv, or all); "
       "a group holding one runs there whole."},
      {"FORESTCC_CLUSTER", "string", "",
       "Id of the emulated cluster whose hosts forestcc-run --hosts and forestcc-cluster exec and "
       "rsh-agent name (set by forestcc-cluster run)."},
  };
  return table;
}

std::string configString(const char* name) {
  for (const auto& e : configTable()) {
    if (std::string(e.name) == name) {
      const char* v = std::getenv(name);
      return v ? std::string(v) : std::string(e.defaultValue);
    }
  }
  throw Error(ErrorCode::Internal, std::string("forestcc: unknown configuration knob ") + name);
}

static double parseFloat(const char* name, bool zeroAllowed = false) {
  std::string s = configString(name);
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used != s.size() || !(v > 0 || (zeroAllowed && v == 0))) throw std::invalid_argument(s);
    return v;
  } catch (const std::exception&) {
    throw Error(ErrorCode::InvalidUsage, std::string("forestcc: ") + name + "='" + s + "' is not a " +
                                             (zeroAllowed ? "number >= 0" : "positive number"));
  }
}

namespace config {
double timeoutSeconds() { return std::min(parseFloat("FORESTCC_TIMEOUT"), kMaxTimeoutSeconds); }
bool debug() {
  std::string s = configString("FORESTCC_DEBUG");
  return !(s.empty() || s == "0" || s == "false" || s == "no" || s == "off");
}
std::string nodeId() { return configString("FORESTCC_NODE_ID"); }
std::string rendezvousDir() { return configString("FORESTCC_RDZV_DIR"); }
std::string shmPrefix() {
  const std::string s = configString("FORESTCC_SHM_PREFIX");
  const bool plain = std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '.'; });
  if (s.empty() || s.size() > kMaxShmPrefixChars || !plain)
    throw Error(ErrorCode::InvalidUsage, "forestcc: FORESTCC_SHM_PREFIX='" + s + "' must be 1 to " +
                                             std::to_string(kMaxShmPrefixChars) +
                                             " letters, digits, '_' or '.' (it starts every shared-memory name)");
  return s;
}
double spinMicroseconds() {
  return configString("FORESTCC_SPIN_US") == "auto" ? -1 : parseFloat("FORESTCC_SPIN_US");
}
double yieldMicroseconds() { return parseFloat("FORESTCC_YIELD_US"); }
double streamingBytes() { return parseFloat("FORESTCC_STREAMING_BYTES"); }
double hugePageBytes() { return parseFloat("FORESTCC_HUGE_PAGE_BYTES", true); }
std::string transports() { return configString("FORESTCC_TRANSPORT"); }
int tcpStreams() {
  const std::string s = configString("FORESTCC_TCP_STREAMS");
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 1 || v > 16)
    throw Error(ErrorCode::InvalidUsage, "forestcc: FORESTCC_TCP_STREAMS='" + s + "' is not an integer from 1 to 16");
  return static_cast<int>(v);
}
std::string socketInterfaces() { return configString("FORESTCC_SOCKET_IFNAME"); }
PacketMode packets() {
  const std::string s = configString("FORESTCC_PACKETS");
  if (s == "on" || s == "1") return PacketMode::On;
  if (s == "off" || s == "0") return PacketMode::Off;
  if (s == "auto") return PacketMode::Auto;
  throw Error(ErrorCode::InvalidUsage, "forestcc: FORESTCC_PACKETS='" + s + "' is not one of on, off, auto");
}
}  // namespace config

}  // namespace forestcc
