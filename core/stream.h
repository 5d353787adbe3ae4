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

// Note [Current streams]
// Work given the null Stream goes to the calling thread's current stream of its device: the legacy default stream
// unless the thread chose another (set_current_stream, StreamGuard, or the C API's dt_set_stream), so that a host
// framework's work and dtensor's (copies, kernels, the order of collectives against the caller) share one stream.
// Every CUDA call site turns the null Stream into a stream through resolve_stream, on the thread that issues the
// work (a backend's worker thread never resolves: it gets the caller's stream resolved). Changing a device's current
// stream makes the new stream wait for the work queued on the old one (an event; the host does not wait): the
// caching allocator reuses a freed block in the order of the current stream (Note [Stream-safe frees] in
// allocator.cc), and that order must hold across a switch too.

// The calling thread's current stream of `device` (the null Stream: the legacy default stream; always null on the
// CPU).
Stream current_stream(const Device& device);
// Makes `stream` (a stream of `device`; null: the legacy default stream) the calling thread's current stream of
// `device`, ordered after the work queued on the previous one. Throws InvalidArgument for a non-null stream on the
// CPU, Unsupported when the device cannot be used.
void set_current_stream(const Device& device, Stream stream);
// `stream`, or the calling thread's current stream of `device` when `stream` is null.
inline Stream resolve_stream(Stream stream, const Device& device) {
  return stream.handle != nullptr || device.is_cpu() ? stream : current_stream(device);
}

// set_current_stream for a scope; the previous current stream is restored (and ordered after this one) at its end.
class StreamGuard {
 public:
  StreamGuard(const Device& device, Stream stream) : device_(device), previous_(current_stream(device)) {
    set_current_stream(device, stream);
  }
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  Stream previous_;
};

// A marker of the work queued on a stream up to the moment it was recorded. A value: copies refer to the same CUDA
// event, which is returned to a per-device pool when the last copy goes. A default-constructed Event is empty and
// complete. Thread-safe as CUDA events are: any thread may query or block on one.
class Event {
 public:
  Event() = default;
  // Marks the work queued on `stream` of `device` so far (the null Stream: the thread's current stream of `device`).
  static Event record(const Device& device, Stream stream);

  // Work queued on `stream` (of any device; the null Stream: the thread's current stream of the event's device)
  // after this call runs after the recorded work. The host does not wait.
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
