// Calls on GPU memory, as the executor hands them to its CUDA runner (device_runner.hpp).
#include "executor/device_runner.hpp"
#include "executor/executor.hpp"
#include "forestcc/error.hpp"

namespace forestcc::executor {

DeviceRunner& Executor::device() {
  if (!device_) device_ = makeDeviceRunner(*this);
  return *device_;
}

void Executor::runOnDevice(const CompiledPlan& plan, const CallBuffers& call, int standIn, void* stream) {
  device().enqueue(plan, call, standIn, stream);
}

void Executor::synchronizeDevice() {
  if (device_) device_->synchronize();
}

std::function<bool(bool)> Executor::deviceCompletion() { return device().completion(); }

#ifndef FORESTCC_WITH_CUDA
std::unique_ptr<DeviceRunner> makeDeviceRunner(Executor&) {
  throw Error(ErrorCode::InvalidUsage,
              "this forestcc was built without CUDA (no nvcc when it was built): it cannot run collectives on GPU "
              "memory");
}
#endif

}  // namespace forestcc::executor
