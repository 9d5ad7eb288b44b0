#include "bootstrap/file_rendezvous.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "bootstrap/socket.hpp"
#include "forestcc/config.hpp"
#include "forestcc/error.hpp"

namespace forestcc {

namespace {

std::string rendezvousPath(const std::string& key) {
  std::string safe;
  for (char c : key) safe.push_back(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_');
  return config::rendezvousDir() + "/forestcc-rdzv-" + safe;
}

bool readId(const std::string& path, UniqueId& out) {
  std::ifstream f(path);
  std::string hex;
  if (!(f >> hex)) return false;
  try {
    out = UniqueId::fromHex(hex);
    return true;
  } catch (const Error&) {
    return false;  // partially written or foreign content: read again
  }
}

// A stale file (an earlier job with the same key) points at a dead port or at a root with another
// magic: those failures mean "read the file again", not "give up".
bool worthRetrying(const Error& e) {
  return (e.code() == ErrorCode::Timeout && e.peer() < 0) ||
         (e.code() == ErrorCode::InvalidUsage && std::strstr(e.what(), "wrong magic") != nullptr);
}

}  // namespace

std::unique_ptr<Bootstrap> joinThroughFile(const LaunchInfo& info, double timeoutSeconds) {
  std::string path = rendezvousPath(info.rendezvousKey);
  if (info.rank == 0) {
    UniqueId id = UniqueId::create();
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    {
      std::ofstream f(tmp);
      f << id.hex() << "\n";
      if (!f) throwSystemError("write " + tmp, errno, 0);
    }
    if (rename(tmp.c_str(), path.c_str()) != 0) throwSystemError("rename " + tmp, errno, 0);
    try {
      auto b = std::make_unique<Bootstrap>(0, info.size, id, timeoutSeconds);
      unlink(path.c_str());
      return b;
    } catch (...) {
      unlink(path.c_str());
      throw;
    }
  }
  Deadline deadline = Deadline::in(timeoutSeconds);
  int sleepMs = 2;
  std::string lastError = "the file " + path + " never appeared";
  while (!deadline.expired()) {
    UniqueId id;
    if (readId(path, id)) {
      try {
        return std::make_unique<Bootstrap>(info.rank, info.size, id, timeoutSeconds, -1, 2.0);
      } catch (const Error& e) {
        if (!worthRetrying(e)) throw;
        lastError = e.what();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
    sleepMs = std::min(sleepMs * 2, 100);
  }
  std::ostringstream msg;
  msg << rankPrefix(info.rank) << "timed out after " << timeoutSeconds << " s in the " << info.source
      << " file rendezvous (" << path << "): " << lastError
      << ". Is rank 0 running on this node? For several nodes set FORESTCC_ROOT_ADDR=host:port"
         " or pass a unique id (forestcc.init(unique_id=...)).";
  throw Error(ErrorCode::Timeout, msg.str(), info.rank, 0);
}

}  // namespace forestcc
