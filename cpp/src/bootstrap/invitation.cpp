// Invitations (forestcc/bootstrap.hpp): the host answers new ranks on the invitation's kept
// listening socket with the job's id; a new rank asks with a Hello of kind kHelloInvitation.
#include <algorithm>
#include <string>
#include <vector>

#include "bootstrap/hello.hpp"
#include "bootstrap/root_sockets.hpp"
#include "bootstrap/socket.hpp"
#include "forestcc/bootstrap.hpp"
#include "forestcc/error.hpp"

namespace forestcc {

namespace {

const char* const kHost = "the invitation's host";

uint32_t check(const Hello& h, uint64_t magic, int firstNew, int nranks, const std::vector<bool>& answered) {
  if (!h.fromJob(magic) || h.kind != kHelloInvitation) return kWrongMagic;
  if (h.nranks != nranks) return kSizeMismatch;
  if (h.rank < 0 || h.rank >= nranks) return kBadRank;
  if (h.rank < firstNew) return kNotNew;
  if (answered[h.rank]) return kDuplicateRank;
  return kOk;
}

}  // namespace

void answerInvitation(const UniqueId& invitation, const UniqueId& job, int firstNew, int nranks, double timeoutSeconds,
                      const std::atomic<bool>* cancel) {
  Socket listener = RootSockets::instance().take(invitation.magic());
  if (!listener.valid())
    throw Error(ErrorCode::InvalidUsage, "this process did not make the invitation " + invitation.address() +
                                             " (or has answered it already): the id of ncclCommGetUniqueId is "
                                             "passed to ncclCommGrow only by the rank that made it");
  std::vector<bool> answered(nranks, false);
  int left = nranks - firstNew;
  const Deadline deadline = Deadline::in(timeoutSeconds, cancel);
  while (left > 0) {
    Socket guest;
    try {
      guest = listener.accept(deadline, -1);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      std::string missing;
      for (int r = firstNew; r < nranks; ++r)
        if (!answered[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw Error(ErrorCode::Timeout, "no new rank " + missing + " asked for the job's id within " +
                                          std::to_string(timeoutSeconds) + " s (FORESTCC_TIMEOUT)");
    }
    try {
      // A process that connects and says nothing is given up on soon: new ranks wait behind it.
      const Deadline hello = Deadline::in(std::min(timeoutSeconds, 10.0));
      Hello h;
      guest.recvAll(&h, sizeof h, hello.at < deadline.at ? hello : deadline, -1, "a new rank");
      const uint32_t status = check(h, invitation.magic(), firstNew, nranks, answered);
      guest.sendAll(&status, sizeof status, deadline, -1, "a new rank");
      if (status != kOk) continue;  // that process learns why; the host waits for the right ones
      guest.sendAll(job.bytes.data(), job.bytes.size(), deadline, -1, "rank " + std::to_string(h.rank));
      answered[h.rank] = true;
      --left;
    } catch (const Error&) {
      // a process that hung up or fell silent mid-way: not one of ours, or it will ask again; the
      // accept's deadline names the ranks still missing
    }
  }
}

UniqueId acceptInvitation(const UniqueId& invitation, int rank, int nranks, double timeoutSeconds,
                          const std::atomic<bool>* cancel) {
  const Deadline deadline = Deadline::in(timeoutSeconds, cancel);
  Socket host = Socket::connect(uniqueIdAddress(invitation), deadline, rank, kHost);
  const Hello h = Hello::of(kHelloInvitation, invitation.magic(), rank, nranks);
  host.sendAll(&h, sizeof h, deadline, rank, kHost);
  uint32_t status = kOk;
  host.recvAll(&status, sizeof status, deadline, rank, kHost);
  if (status != kOk)
    throw Error(ErrorCode::InvalidUsage, "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + ": " +
                                             kHost + " " + invitation.address() + " refused it: " + helloStatusText(status),
                rank);
  UniqueId job;
  host.recvAll(job.bytes.data(), job.bytes.size(), deadline, rank, kHost);
  return job;
}

}  // namespace forestcc
