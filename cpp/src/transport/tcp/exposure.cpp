#include "transport/tcp/exposure.hpp"

namespace forestcc::tcp {

namespace {
bool inside(uint64_t address, uint64_t bytes, uint64_t start, uint64_t size) {
  return address >= start && bytes <= size && address - start <= size - bytes;
}
}  // namespace

std::shared_ptr<void> Exposure::expose(uint64_t address, uint64_t bytes) {
  std::multimap<uint64_t, uint64_t>::iterator it;
  {
    std::lock_guard<std::mutex> g(mu_);
    it = ranges_.emplace(address, address + bytes);
  }
  struct Offer {
    Offer(std::shared_ptr<Exposure> o, std::multimap<uint64_t, uint64_t>::iterator i) : owner(std::move(o)), it(i) {}
    Offer(const Offer&) = delete;
    std::shared_ptr<Exposure> owner;
    std::multimap<uint64_t, uint64_t>::iterator it;
    ~Offer() {
      std::lock_guard<std::mutex> g(owner->mu_);
      owner->ranges_.erase(it);
    }
  };
  return std::make_shared<Offer>(shared_from_this(), it);
}

bool Exposure::covers(uint64_t address, uint64_t bytes) const {
  const CallMailbox& mb = own_->mailbox;
  for (const MemoryHandle& h : mb.handles)
    if (h.size && inside(address, bytes, h.address, h.size)) return true;
  for (const char* bank : own_->scratchBanks.bank)
    if (inside(address, bytes, reinterpret_cast<uint64_t>(bank), kScratchBankBytes)) return true;
  std::lock_guard<std::mutex> g(mu_);
  // Ranges may overlap (a buffer registered twice): any one that holds the whole range will do.
  for (auto it = ranges_.begin(); it != ranges_.end() && it->first <= address; ++it)
    if (inside(address, bytes, it->first, it->second - it->first)) return true;
  return false;
}

}  // namespace forestcc::tcp
