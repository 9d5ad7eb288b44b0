// Bootstrap: rendezvous of the ranks of a job over TCP and small control messages between them.
// Rank 0 listens on the address inside the unique id; every other rank connects to it, and from
// then on ranks exchange blobs with allGather/barrier (through rank 0) and send/recv (direct).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace forestcc {

// 128 opaque bytes: rank 0's TCP address plus a random 64-bit magic that identifies the job.
// Connections that present another magic (another job, a stale id) are refused.
struct UniqueId {
  static constexpr size_t kBytes = 128;
  std::array<uint8_t, kBytes> bytes{};

  // A fresh id whose address is this host's first non-loopback IPv4 address (127.0.0.1 when
  // there is none). The listening socket is opened now and kept for rank 0 of this process.
  static UniqueId create();
  // An id for a known address ("host:port") and magic; rank 0 binds that address itself.
  static UniqueId fromAddress(const std::string& hostPort, uint64_t magic);
  static UniqueId fromBytes(const std::string& raw);  // throws InvalidUsage unless a valid id

  uint64_t magic() const;
  std::string address() const;  // "host:port"
  std::string hex() const;
  static UniqueId fromHex(const std::string& hex);
};

// How this process was launched: which launcher's conventions gave its rank and size, and how
// to reach rank 0.
struct LaunchInfo {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  std::string source;        // "forestcc-run", "openmpi", "mpich", "slurm", "torchrun", "single"
  std::string rootAddress;   // "host:port" when the environment gives one
  uint64_t magic = 0;        // job magic agreed from the environment (0: from the file rendezvous)
  std::string rendezvousKey; // non-empty: rendezvous through a file named after this key
  int rootListenFd = -1;     // rank 0 under forestcc-run: the listening socket the launcher opened
};

// Reads the launch environment (see the README's table); throws InvalidUsage on inconsistent values.
LaunchInfo detectLaunch();
// Throws InvalidUsage when `info` gives several ranks no way to meet (several nodes, no address
// for rank 0): joining from the environment needs one; a caller that brings its own unique id
// (mpi4py's broadcast) does not, so detectLaunch() itself does not refuse.
void requireRendezvous(const LaunchInfo& info);

// Closes the listening socket UniqueId::create() kept in this process, for an id no rank will
// join (a refused shrink or grow, an invitation replaced or never answered); a no-op otherwise.
void releaseUniqueId(const UniqueId& id);

// Invitations (NCCL's ncclCommGetUniqueId, then ncclCommGrow): an id that leads new ranks to a job
// whose own id another process makes later. The inviting process made `invitation` with
// UniqueId::create(), which keeps its listening socket; once the job's id exists it answers each
// new rank's connection there with it. A new rank presents the invitation's magic, its rank and
// the job's size, and is refused with the reason when one is wrong.
//
// The host: answers ranks [firstNew, nranks) once each with `job`; throws Timeout at the
// deadline naming the ranks that never asked, InvalidUsage when this process did not make the
// invitation (or already answered it), Aborted once `cancel` (optional) is set.
void answerInvitation(const UniqueId& invitation, const UniqueId& job, int firstNew, int nranks,
                      double timeoutSeconds, const std::atomic<bool>* cancel = nullptr);
// A new rank: returns the job's id; throws InvalidUsage with the host's reason when refused,
// Timeout when no answer came in time, Aborted once `cancel` (optional) is set.
UniqueId acceptInvitation(const UniqueId& invitation, int rank, int nranks, double timeoutSeconds,
                          const std::atomic<bool>* cancel = nullptr);

class Bootstrap {
 public:
  // Joins the job described by `id` as `rank` of `nranks`. Blocks until every rank has arrived
  // or the timeout passes (the error then names the ranks that never arrived).
  // rootListenFd: rank 0 may be handed an already listening socket (forestcc-run does this).
  // connectTimeoutSeconds (0: timeoutSeconds) bounds only the first connection to rank 0.
  // cancel (optional): once set, every wait of this bootstrap (the rendezvous included) ends
  // within about 100 ms with an Aborted error (NCCL's ncclCommAbort of a communicator whose
  // non-blocking init is still waiting for its peers).
  Bootstrap(int rank, int nranks, const UniqueId& id, double timeoutSeconds, int rootListenFd = -1,
            double connectTimeoutSeconds = 0, std::shared_ptr<const std::atomic<bool>> cancel = nullptr);
  // Joins the job this process was launched into (detectLaunch()).
  static std::unique_ptr<Bootstrap> fromEnvironment(double timeoutSeconds);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const;
  int nranks() const;
  double timeoutSeconds() const;  // what it was made with; the communicator's waits use it too
  uint64_t magic() const;
  const UniqueId& id() const;

  // Every rank contributes one blob (sizes may differ) and receives all of them, by rank.
  std::vector<std::string> allGather(const std::string& mine);
  void barrier();
  // Point-to-point blobs, matched by (peer, tag) in FIFO order per key. Tags with the top bit set
  // are reserved for forestcc itself.
  void send(int peer, uint64_t tag, const std::string& data);
  std::string recv(int peer, uint64_t tag);

  static constexpr uint64_t kInternalTag = 1ull << 63;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace forestcc
