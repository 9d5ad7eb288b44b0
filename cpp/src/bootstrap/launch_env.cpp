// Rank, size and rendezvous from the launcher's environment. Precedence: forestcc-run, Open MPI,
// MPICH/hydra, torchrun, Slurm (a launcher nested in another sees both; the inner one wins).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "forestcc/bootstrap.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"

namespace forestcc {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int envInt(const char* name, const std::string& source, bool required = true, int fallback = -1) {
  const char* v = env(name);
  if (!v) {
    if (!required) return fallback;
    throw Error(ErrorCode::InvalidUsage, "forestcc: launched by " + source + " but " + name + " is not set");
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 30))
    throw Error(ErrorCode::InvalidUsage,
                std::string("forestcc: ") + name + "='" + v + "' is not a non-negative integer");
  return static_cast<int>(x);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h ? h : 1;
}

// First host of a Slurm hostlist: "node[01-04,07],gpu3" -> "node01".
std::string firstSlurmHost(const std::string& list) {
  auto bracket = list.find('[');
  auto comma = list.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket))
    return list.substr(0, comma);
  std::string prefix = list.substr(0, bracket);
  std::string range = list.substr(bracket + 1);
  size_t end = range.find_first_of("-,]");
  return prefix + range.substr(0, end);
}

void checkRank(LaunchInfo& info, const char* rankVar, const char* sizeVar) {
  if (info.size < 1)
    throw Error(ErrorCode::InvalidUsage, std::string("forestcc: ") + sizeVar + " must be at least 1");
  if (info.rank >= info.size)
    throw Error(ErrorCode::InvalidUsage, std::string("forestcc: ") + rankVar + "=" + std::to_string(info.rank) +
                                             " is not below " + sizeVar + "=" + std::to_string(info.size));
}

}  // namespace

LaunchInfo detectLaunch() {
  LaunchInfo info;
  if (env("FORESTCC_RANK")) {
    info.source = "forestcc-run";
    info.rank = envInt("FORESTCC_RANK", info.source);
    info.size = envInt("FORESTCC_SIZE", info.source);
    info.localRank = envInt("FORESTCC_LOCAL_RANK", info.source, false, info.rank);
    checkRank(info, "FORESTCC_RANK", "FORESTCC_SIZE");
    const char* job = env("FORESTCC_JOB_ID");
    info.magic = job ? std::strtoull(job, nullptr, 16) : 0;
    if (!info.magic) throw Error(ErrorCode::InvalidUsage, "forestcc: FORESTCC_JOB_ID must be a non-zero hex number");
    if (info.rank == 0 && env("FORESTCC_ROOT_FD")) {
      int fd = envInt("FORESTCC_ROOT_FD", info.source);
      int listening = 0;
      socklen_t len = sizeof listening;
      // Use the launcher's socket only if it really is a listening socket (an exec chain may
      // have closed or reused the descriptor).
      if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening) info.rootListenFd = fd;
    }
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    info.source = "openmpi";
    info.rank = envInt("OMPI_COMM_WORLD_RANK", info.source);
    info.size = envInt("OMPI_COMM_WORLD_SIZE", info.source);
    info.localRank = envInt("OMPI_COMM_WORLD_LOCAL_RANK", info.source, false, 0);
    checkRank(info, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
    const char* ns = env("PMIX_NAMESPACE");
    const char* jobid = env("OMPI_MCA_ess_base_jobid");
    info.rendezvousKey = "ompi-" + std::string(ns ? ns : jobid ? jobid : std::to_string(getppid()));
    if (envInt("OMPI_COMM_WORLD_LOCAL_SIZE", info.source, false, info.size) < info.size)
      info.rendezvousKey.clear();  // several nodes: a node-local file cannot work
  } else if (env("PMI_RANK")) {
    info.source = "mpich";
    info.rank = envInt("PMI_RANK", info.source);
    info.size = envInt("PMI_SIZE", info.source);
    info.localRank = envInt("MPI_LOCALRANKID", info.source, false, 0);
    checkRank(info, "PMI_RANK", "PMI_SIZE");
    const char* kvs = env("PMI_KVSNAME");
    // Hydra starts all ranks of a node from one proxy, so its pid names the job on this node.
    info.rendezvousKey = "mpich-" + std::string(kvs ? kvs : std::to_string(getppid()));
    if (envInt("MPI_LOCALNRANKS", info.source, false, info.size) < info.size) info.rendezvousKey.clear();
  } else if (env("TORCHELASTIC_RUN_ID") || (env("RANK") && env("WORLD_SIZE") && env("MASTER_ADDR"))) {
    info.source = "torchrun";
    info.rank = envInt("RANK", info.source);
    info.size = envInt("WORLD_SIZE", info.source);
    info.localRank = envInt("LOCAL_RANK", info.source, false, 0);
    checkRank(info, "RANK", "WORLD_SIZE");
    const char* addr = env("MASTER_ADDR");
    int port = envInt("MASTER_PORT", info.source);
    if (!addr) throw Error(ErrorCode::InvalidUsage, "forestcc: launched by torchrun but MASTER_ADDR is not set");
    // torchrun's own store holds MASTER_PORT; rank 0 of forestcc listens on the next port.
    info.rootAddress = std::string(addr) + ":" + std::to_string(port + 1);
    const char* run = env("TORCHELASTIC_RUN_ID");
    info.magic = fnv1a(std::string("torchrun/") + (run ? run : "") + "/" + info.rootAddress);
  } else if (env("SLURM_PROCID")) {
    info.source = "slurm";
    info.rank = envInt("SLURM_PROCID", info.source);
    info.size = envInt("SLURM_NTASKS", info.source);
    info.localRank = envInt("SLURM_LOCALID", info.source, false, 0);
    checkRank(info, "SLURM_PROCID", "SLURM_NTASKS");
    std::string job = std::string(env("SLURM_JOB_ID") ? env("SLURM_JOB_ID") : "0") + "." +
                      (env("SLURM_STEP_ID") ? env("SLURM_STEP_ID") : "0");
    int nodes = envInt("SLURM_STEP_NUM_NODES", info.source, false, envInt("SLURM_NNODES", info.source, false, 1));
    if (nodes <= 1) {
      info.rendezvousKey = "slurm-" + job;
    } else if (const char* list = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_NODELIST")) {
      // Block distribution puts rank 0 on the first node; the port is derived from the job id.
      info.rootAddress = firstSlurmHost(list) + ":" + std::to_string(20000 + fnv1a(job) % 20000);
      info.magic = fnv1a("slurm/" + job);
    }
  } else {
    info.source = "single";
  }
  if (const char* root = env("FORESTCC_ROOT_ADDR")) {
    if (info.source != "forestcc-run") {
      const char* job = env("FORESTCC_JOB_ID");
      info.magic = job ? std::strtoull(job, nullptr, 16) : fnv1a(info.source + "/" + root);
    }
    info.rootAddress = root;
    info.rendezvousKey.clear();
  }
  return info;
}

void requireRendezvous(const LaunchInfo& info) {
  if (info.size > 1 && info.rootAddress.empty() && info.rendezvousKey.empty())
    throw Error(ErrorCode::InvalidUsage,
                "forestcc: " + info.source + " started " + std::to_string(info.size) +
                    " ranks on several nodes but gave no address for rank 0: set FORESTCC_ROOT_ADDR=host:port "
                    "(a free port on rank 0's node) or create a unique id on rank 0 and broadcast it "
                    "(forestcc.init(unique_id=...); forestcc.init() does this by itself when mpi4py is imported)");
}

}  // namespace forestcc
