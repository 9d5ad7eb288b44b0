// The public face of shm's segments (forestcc/memory.hpp): forestcc.empty()'s allocations and the
// sweep of segments whose owner died.
#include "forestcc/memory.hpp"
#include "transport/shm/shm_segment.hpp"

namespace forestcc {

SharedAllocation::SharedAllocation(size_t size) : segment_(allocateShared(size)) {}
void* SharedAllocation::data() const { return segment_->data(); }
size_t SharedAllocation::size() const { return segment_->size(); }
const std::string& SharedAllocation::name() const { return segment_->name(); }

int sweepStaleSharedMemory() { return sweepStaleSegments(); }
int ownedSharedMemorySegments() { return ownedSegmentCount(); }

}  // namespace forestcc
