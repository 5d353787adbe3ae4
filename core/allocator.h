// Per-device memory: a caching pool per device so that hot paths (a collective, a redistribution step, an FSDP
// unshard) allocate nothing once warm. CUDA memory is only requested when a GPU is present.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"

namespace dt {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for at least `nbytes` bytes (64-byte aligned; nullptr for 0 bytes). Throws on failure.
  virtual void* allocate(size_t nbytes) = 0;
  // The same, preferring the cached block at `hint` (a block this pool handed out before and got back) when it is
  // free: a storage that is released and re-filled every step (an FSDP parameter) then keeps its address, and views
  // made over it stay valid (Note [Hook hand-offs] in bindings/python/dtensor/torch/_param_group.py).
  virtual void* allocate(size_t nbytes, const void* hint) {
    (void)hint;
    return allocate(nbytes);
  }
  // Returns memory from allocate(nbytes) to the pool.
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  // Frees every cached block back to the system (except host blocks cut from huge-page slabs, which stay: Note
  // [Huge pages for host blocks] in allocator.cc).
  virtual void empty_cache() = 0;
  // Bytes currently handed out (not counting the cache) and the peak since start.
  virtual size_t allocated_bytes() const = 0;
  virtual size_t peak_allocated_bytes() const = 0;
  virtual size_t cached_bytes() const = 0;
  // Declares that work queued on `stream` uses the block holding `ptr` (any address inside a block from allocate()):
  // once deallocated, the block is not handed out again before the work queued on `stream` up to the deallocation
  // has finished (Note [Stream-safe frees] in allocator.cc). No-op on the CPU and for addresses from elsewhere.
  virtual void record_stream(const void* ptr, Stream stream) {
    (void)ptr;
    (void)stream;
  }
  // Call before destroying `stream` (a communicator's internal stream): every live block recorded on it is ordered by
  // an event recorded on it now instead, so that its free records nothing on a stream that no longer exists.
  virtual void forget_stream(Stream stream) { (void)stream; }
};

// Note [Temporaries of an op on another stream]
// An op given an explicit stream that is not its device's current one queues its kernels there, and frees its
// temporaries (contiguous copies, casts to the compute dtype) when it returns, while those kernels may still run: a
// block reused at once by the current stream would race them. While a StreamUseScope is alive, every block that this
// thread allocates on `device` is recorded on `stream` (record_stream) as it is handed out, so its free waits for the
// work queued there (Note [Stream-safe frees] in allocator.cc), temporaries and outputs alike. Every kernel entry
// point that takes a stream opens one; it costs nothing on the CPU, for the null stream and for the current stream.
// Inputs the caller made elsewhere are the caller's to record, as with PyTorch's record_stream.
class StreamUseScope {
 public:
  StreamUseScope(Device device, Stream stream);
  ~StreamUseScope();
  StreamUseScope(const StreamUseScope&) = delete;
  StreamUseScope& operator=(const StreamUseScope&) = delete;

 private:
  Device prev_device_;
  Stream prev_stream_;
  bool prev_active_;
};

// The process-wide pool for `device` (created on first use; never destroyed).
Allocator& allocator_for(const Device& device);

// Events on streams, as a device pool uses them to order the reuse of freed blocks (CUDA events in production).
class StreamEvents {
 public:
  virtual ~StreamEvents() = default;
  virtual void* record(Stream stream) = 0;  // an event marking the work queued on `stream` so far
  virtual bool query(void* event) = 0;      // whether that work finished
  virtual void synchronize(void* event) = 0;
  virtual void destroy(void* event) = 0;
};

// A caching pool over host memory whose frees are ordered by `events` as a device pool's are: for tests of that
// bookkeeping without a device.
std::unique_ptr<Allocator> make_stream_ordered_pool_for_testing(std::shared_ptr<StreamEvents> events);

}  // namespace dt
