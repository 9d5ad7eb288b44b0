// The CUDA runner as the executor sees it. Calls on GPU memory run the same compiled plans as
// host calls, through the same interpreter (interpreter.hpp), compiled for CUDA thread blocks
// (cuda/device_kernel.cu); the runner (cuda/device_runner.cu) does the per-call protocol on the
// host and launches one kernel per call on the caller's stream, then returns. What the kernel
// and the host share is plain data (device_launch.hpp).
#pragma once

#include <functional>
#include <memory>

#include "forestcc/collectives.hpp"

namespace forestcc::executor {

class Executor;
struct CompiledPlan;

class DeviceRunner {
 public:
  virtual ~DeviceRunner() = default;
  // Publishes the call, opens the peers' buffers of it, launches the kernel on `stream` (a
  // cudaStream_t; null: the legacy default stream) and returns. standIn (Engine::StandIn): 1 or 2
  // when the input or the output is a buffer this rank does not pass, which the runner provides. An error of a call enqueued
  // before, that has finished since, is raised first.
  virtual void enqueue(const CompiledPlan& plan, const CallBuffers& call, int standIn, void* stream) = 0;
  // Blocks until every enqueued call finished; raises the first error one hit.
  virtual void synchronize() = 0;
  // The completion of the last enqueued call: called with true it blocks until the call finished
  // and raises its error; with false it only polls (true: finished, its error raised).
  virtual std::function<bool(bool)> completion() = 0;
};

// The CUDA runner of `ex` (cuda/device_runner.cu); a build without CUDA raises InvalidUsage.
std::unique_ptr<DeviceRunner> makeDeviceRunner(Executor& ex);

}  // namespace forestcc::executor
