// Per-device memory: a caching pool per device so that hot paths (a collective, a redistribution step, an FSDP
// unshard) allocate nothing once warm. CUDA memory is only requested when a GPU is present.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace dt {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for at least `nbytes` bytes (64-byte aligned; nullptr for 0 bytes). Throws on failure.
  virtual void* allocate(size_t nbytes) = 0;
  // Returns memory from allocate(nbytes) to the pool.
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  // Frees every cached block back to the system (except host blocks cut from huge-page slabs, which stay: Note
  // [Huge pages for host blocks] in allocator.cc).
  virtual void empty_cache() = 0;
  // Bytes currently handed out (not counting the cache) and the peak since start.
  virtual size_t allocated_bytes() const = 0;
  virtual size_t peak_allocated_bytes() const = 0;
  virtual size_t cached_bytes() const = 0;
};

// The process-wide pool for `device` (created on first use; never destroyed).
Allocator& allocator_for(const Device& device);

}  // namespace dt
