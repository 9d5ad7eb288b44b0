// Copies of the CPU executor. Large copies use non-temporal (streaming) stores: a plain copy of
// data that does not fit in cache reads every destination line before overwriting it (and evicts
// data the next op needs), so it moves three bytes per byte copied; streaming stores move two.
// Measured on the 2-core development machine: 64 MiB copies 12 -> 19 GB/s; below a few MiB the
// destination is better left in cache (glibc's own switch-over point depends on the cache size
// the CPU reports, which virtual machines often misreport).
#pragma once

#include <cstddef>

namespace forestcc::executor {

// memcpy, with streaming stores when `streaming` (and the copy is big enough to be worth it).
// dst and src must not overlap. A streamed copy ends with a store fence, so a later signal
// (a release add, which does not order non-temporal stores on x86) publishes it.
void copyBytes(void* dst, const void* src, size_t bytes, bool streaming);

}  // namespace forestcc::executor
