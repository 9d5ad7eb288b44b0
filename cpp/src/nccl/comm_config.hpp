// What the shim takes from an ncclConfig_t: read field by field within the caller's `size`, so a
// program built against an older nccl.h (a smaller struct) works, and a struct that was never
// initialised with NCCL_CONFIG_INITIALIZER is refused.
#pragma once

#include <string>

#include "nccl/include/nccl.h"

namespace forestcc::nccl {

struct CommConfig {
  bool blocking = true;
  std::string name;  // commName, for messages
  int splitShare = 0;
};

// `inherit` gives the defaults for fields the config leaves undefined (a split's parent).
CommConfig readConfig(const ncclConfig_t* config, const CommConfig& inherit = {});

}  // namespace forestcc::nccl
