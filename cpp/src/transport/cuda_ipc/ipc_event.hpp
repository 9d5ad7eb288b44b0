// Ordering GPU work of two processes of one node: interprocess CUDA events and the stream
// operations of a point-to-point transfer of GPU memory (collectives/point_to_point.cpp).
//
// A process records one of its SharedEvents on its stream and hands the event's handle to a
// peer, whose stream then waits for it (waitForPeerEvent); the peer opens each handle once per
// process. cudaStreamWaitEvent waits for the record that was the event's latest when it was
// called, so an event may be recorded again as soon as every peer that waits for it has called
// waitForPeerEvent: the point-to-point protocol knows that moment from its rendezvous.
//
// Events are never destroyed: a SharedEvent goes back to a process-wide pool, so the handle a
// peer opened and cached always names a live event of this process. A build without CUDA has
// the same functions; every one of them raises InvalidUsage ("built without CUDA").
#pragma once

#include <cstdint>
#include <string>

namespace forestcc::cuda_ipc {

// An event as a peer opens it: plain data, carried in point-to-point manifests.
struct EventHandle {
  uint8_t ipc[64] = {};  // cudaIpcEventHandle_t
  int32_t ownerPid = 0;  // 0: no event
  int32_t device = -1;
};

// Whether this build can move GPU memory (false: built without CUDA).
bool available();

// Makes `device` the calling thread's current CUDA device while it lives (queued batches run on
// the engine's threads, whose current device is not the caller's) and gives the caller's back.
class CurrentDevice {
 public:
  CurrentDevice(int device, const std::string& what);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;
};

// An interprocess event of this process on one device, from the pool.
class SharedEvent {
 public:
  SharedEvent(int device, const std::string& what);
  ~SharedEvent();
  SharedEvent(const SharedEvent&) = delete;
  SharedEvent& operator=(const SharedEvent&) = delete;

  int device() const { return device_; }
  // Records the event on `stream` (a cudaStream_t of this event's device) and returns the handle
  // a peer waits on.
  EventHandle record(void* stream, const std::string& what);
  // Makes `stream` (of this process) wait for the event's last record.
  void awaitOn(void* stream, const std::string& what) const;
  // The handle of the last record (peers wait for it).
  const EventHandle& handle() const { return handle_; }
  // Whether the GPU reached the last record (raises a CUDA error, naming `what`).
  bool reached(const std::string& what) const;

 private:
  void* event_ = nullptr;  // cudaEvent_t
  int device_;
  EventHandle handle_;
};

// Whether `stream` is being captured into a CUDA graph (a record there is not a record a peer can
// wait for).
bool capturing(void* stream, const std::string& what);

// Makes `stream` wait for the peer's record of the event `h` names (opened once per process).
void waitForPeerEvent(const EventHandle& h, void* stream, const std::string& what);

// A stream of this process on `device` that does not synchronise with the legacy default stream
// (cudaStreamNonBlocking), made at the first call for that device and kept: for GPU work a call
// without a stream of its own must enqueue (a host-only batch finishing a GPU one).
void* sideStream(int device, const std::string& what);

// Enqueues a copy of `bytes` bytes between device addresses (this process's or a peer's opened
// memory) on `stream`.
void copyOnStream(void* dst, const void* src, uint64_t bytes, void* stream, const std::string& what);

}  // namespace forestcc::cuda_ipc
