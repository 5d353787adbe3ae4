// Streams and events, so that work on several streams of a device is ordered on the device, never by blocking the
// host (the FSDP engine's all-gather and reduce-scatter streams against the caller's stream). On the CPU, where
// work is done when the call returns, every call is a no-op: create_stream gives the null Stream, Event::record an
// empty event, which reads as complete.
#pragma once

#include <memory>

#include "core/device.h"

namespace dt {

// A new non-blocking CUDA stream on `device` (it does not synchronize with the legacy default stream: order it with
// events); the null Stream on the CPU. Throws Unsupported / CudaError when the device cannot be used.
Stream create_stream(const Device& device);
// Destroys a stream from create_stream once its queued work finished (CUDA's rule); the null Stream is ignored.
void destroy_stream(const Device& device, Stream stream);

// A marker of the work queued on a stream up to the moment it was recorded. A value: copies refer to the same CUDA
// event, which is returned to a per-device pool when the last copy goes. A default-constructed Event is empty and
// complete. Thread-safe as CUDA events are: any thread may query or block on one.
class Event {
 public:
  Event() = default;
  // Marks the work queued on `stream` of `device` so far (the null Stream: the device's legacy default stream).
  static Event record(const Device& device, Stream stream);

  // Work queued on `stream` (of any device; the null Stream: the default stream of the event's device) after this
  // call runs after the recorded work. The host does not wait.
  void block(Stream stream) const;
  // Whether the recorded work finished (true for an empty event). Throws CudaError when it failed.
  bool query() const;
  // Blocks the host until the recorded work finished.
  void synchronize() const;

  bool empty() const { return event_ == nullptr; }
  const Device& device() const { return device_; }
  void* handle() const { return event_.get(); }  // the cudaEvent_t; nullptr when empty

 private:
  Device device_;
  std::shared_ptr<void> event_;
};

}  // namespace dt
