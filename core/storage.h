// Storage: a reference-counted block of device memory shared by a tensor and all its views.
//
// Note [Releasable storage]
// FSDP frees an unsharded parameter after forward and re-fills it before backward, while modules, optimizers and
// user code hold views of it. So a Storage can drop its memory (release()) and get new memory (resize()) without
// changing identity: every view keeps pointing at the same Storage and sees the new bytes. Reading a released
// storage is a clear error, never a dangling pointer.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "core/device.h"
#include "core/memory_stats.h"

namespace dt {

class Storage {
 public:
  using Deleter = std::function<void(void*)>;

  // Allocates `nbytes` from the device's pool.
  static std::shared_ptr<Storage> create(size_t nbytes, Device device);
  // Wraps memory owned elsewhere (DLPack, user buffers); `deleter` (may be empty) runs when the storage dies.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device, Deleter deleter);

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool is_released() const { return released_; }
  // The kind its bytes are charged to (Note [Memory kinds] in core/memory_stats.h): the thread's current kind when
  // it was created. set_memory_kind moves the bytes it holds to another kind (a computed tensor that becomes a
  // gradient); later re-fills are charged to the new kind.
  MemoryKind memory_kind() const { return kind_; }
  void set_memory_kind(MemoryKind kind);

  // Frees the memory; views stay valid objects but may not be read until resize().
  void release();
  // Ensures `nbytes` of memory (allocating from the pool when released or when the size changes; contents are
  // undefined after a reallocation). Wrapped (non-owning) storage cannot be resized.
  void resize(size_t nbytes);

  // For create() and wrap() only (std::make_shared needs a public constructor: one allocation, not two).
  class Key {
    friend class Storage;
    Key() = default;
  };
  Storage(Key, void* data, size_t nbytes, Device device, bool owned, Deleter deleter);

 private:
  void free_memory();

  void* data_;
  void* last_data_ = nullptr;  // the memory resize() got last (a hint for the next one)
  size_t nbytes_;
  Device device_;
  bool owned_;
  bool released_ = false;
  MemoryKind kind_;
  Deleter deleter_;
};

}  // namespace dt
