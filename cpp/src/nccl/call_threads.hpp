// Threads the shim runs work on besides the caller's (a non-blocking communicator's calls, the
// communicators of one group at once), kept between calls: starting a thread for every call cost
// far more than a small call itself.
#pragma once

#include <cstddef>
#include <functional>

namespace forestcc::nccl {

// Runs `job` on a kept thread that is idle, or on a new one when none is (so jobs never wait for
// each other: each may wait for peers that another job serves). A kept thread ends after 30 s
// idle. `job` must not throw. Throws std::system_error when no thread can be started, for want
// of memory too (the job then did not run).
void runOnCallThread(std::function<void()> job);

// Runs job(0) .. job(count - 1) at once, the last on this thread and the others on call threads,
// and returns when all returned; `job` must not throw. When a thread cannot be started it runs
// nothing on this thread, waits for the jobs started (job(0) .. job(*started - 1); started may be
// null), and throws std::system_error.
void runAtOnce(size_t count, const std::function<void(size_t)>& job, size_t* started = nullptr);

}  // namespace forestcc::nccl
