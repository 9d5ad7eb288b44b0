// Which of this rank's memory its tcp peers may write (puts) and read (gets). A put names its
// destination by address, so the receiving proxy checks it before reading bytes into it: a
// confused or stale peer must not scribble over memory this rank did not offer. Offered are the
// buffers of the current call (the mailbox's handles), the eager scratch banks, memory registered
// for channels while its registration lives, and the destination of a get while it runs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "transport/control_block.hpp"

namespace forestcc::tcp {

class Exposure : public std::enable_shared_from_this<Exposure> {
 public:
  explicit Exposure(ControlBlock* own) : own_(own) {}
  // Offers [address, address + bytes) until the returned token is released (it keeps this
  // object alive: registered memory may outlive its communicator).
  std::shared_ptr<void> expose(uint64_t address, uint64_t bytes);
  bool covers(uint64_t address, uint64_t bytes) const;

 private:
  ControlBlock* own_;
  mutable std::mutex mu_;
  std::multimap<uint64_t, uint64_t> ranges_;  // start -> end
};

}  // namespace forestcc::tcp
