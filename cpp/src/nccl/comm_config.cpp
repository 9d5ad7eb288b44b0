#include "nccl/comm_config.hpp"

#include <cstddef>

#include "nccl/result.hpp"

namespace forestcc::nccl {

CommConfig readConfig(const ncclConfig_t* config, const CommConfig& inherit) {
  CommConfig out = inherit;
  if (!config) return out;
  if (config->magic != NCCL_API_MAGIC)
    badArgument("config: magic is 0x" + [&] {
      char b[16];
      snprintf(b, sizeof b, "%x", config->magic);
      return std::string(b);
    }() + ", not 0x" + "cafebeef (initialise it with NCCL_CONFIG_INITIALIZER)");
  if (config->size < offsetof(ncclConfig_t, blocking))
    badArgument("config: size " + std::to_string(config->size) + " is too small for an ncclConfig_t");
  // Present in the caller's struct?
  auto has = [&](size_t offset, size_t bytes) { return offset + bytes <= config->size; };
  if (has(offsetof(ncclConfig_t, blocking), sizeof(int)) && config->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1)
      badArgument("config: blocking is " + std::to_string(config->blocking) + "; expected 0 or 1");
    out.blocking = config->blocking == 1;
  }
  if (has(offsetof(ncclConfig_t, commName), sizeof(const char*)) && config->commName) out.name = config->commName;
  if (has(offsetof(ncclConfig_t, splitShare), sizeof(int)) && config->splitShare != NCCL_CONFIG_UNDEF_INT)
    out.splitShare = config->splitShare;
  return out;
}

}  // namespace forestcc::nccl
