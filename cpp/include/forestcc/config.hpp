// Every configuration knob in one typed table: name, type, default and documentation.
// Nothing else in forestcc reads environment variables for configuration.
#pragma once

#include <string>
#include <vector>

namespace forestcc {

struct ConfigEntry {
  const char* name;   // environment variable
  const char* type;   // "float", "int", "bool", "string"
  const char* defaultValue;
  const char* doc;
};

const std::vector<ConfigEntry>& configTable();

namespace config {
// The longest timeout (about 31 years): a longer one (inf) is this one, since waits count their
// deadline in 64-bit nanoseconds, which overflow past 9.2e9 s (every wait then expired at once).
constexpr double kMaxTimeoutSeconds = 1e9;
// The longest FORESTCC_SHM_PREFIX: segment names (/<prefix>-<pid>-<seq>-<tag>) must fit in their
// table's 96 bytes whole, or the pid is cut off and two ranks' names collide.
constexpr size_t kMaxShmPrefixChars = 40;
double timeoutSeconds();        // FORESTCC_TIMEOUT: deadline of every wait and rendezvous (at most kMaxTimeoutSeconds)
bool debug();                   // FORESTCC_DEBUG
std::string nodeId();           // FORESTCC_NODE_ID (empty: use the hostname)
std::string rendezvousDir();    // FORESTCC_RDZV_DIR
std::string shmPrefix();        // FORESTCC_SHM_PREFIX (checked: 1..kMaxShmPrefixChars of [A-Za-z0-9_.])
double spinMicroseconds();      // FORESTCC_SPIN_US: busy-poll time before a wait yields; -1: auto
double yieldMicroseconds();     // FORESTCC_YIELD_US: yield time before a wait sleeps
double streamingBytes();        // FORESTCC_STREAMING_BYTES: calls this large copy with streaming stores
double hugePageBytes();         // FORESTCC_HUGE_PAGE_BYTES: private buffers this large, used again, go on huge pages
std::string transports();       // FORESTCC_TRANSPORT: "auto" or a list of transport names
int tcpStreams();               // FORESTCC_TCP_STREAMS: sockets per pair of ranks over tcp
std::string socketInterfaces(); // FORESTCC_SOCKET_IFNAME: interfaces tcp listens on ("" : the route to rank 0)
enum class PacketMode { Off, On, Auto };
PacketMode packets();           // FORESTCC_PACKETS: eager plans' data as low-latency packets
}  // namespace config

// Reads a knob from the table (the environment overrides the default); throws on a bad value.
std::string configString(const char* name);

}  // namespace forestcc
