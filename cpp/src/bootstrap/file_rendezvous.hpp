// Rendezvous through a file on the local node, for launchers (mpirun, srun on one node) that give
// ranks their number but no address of rank 0: rank 0 publishes its unique id in a file named after
// the job, the others read it.
#pragma once

#include <memory>

#include "forestcc/bootstrap.hpp"

namespace forestcc {

std::unique_ptr<Bootstrap> joinThroughFile(const LaunchInfo& info, double timeoutSeconds);

}  // namespace forestcc
