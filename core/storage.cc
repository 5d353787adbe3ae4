#include "core/storage.h"

#include "core/allocator.h"
#include "core/error.h"

namespace dt {

Storage::Storage(Key, void* data, size_t nbytes, Device device, bool owned, Deleter deleter)
    : data_(data),
      last_data_(data),
      nbytes_(nbytes),
      device_(device),
      owned_(owned),
      kind_(current_memory_kind()),
      deleter_(std::move(deleter)) {
  if (owned_) count_memory(device_, kind_, int64_t(nbytes_));
}

std::shared_ptr<Storage> Storage::create(size_t nbytes, Device device) {
  void* p = allocator_for(device).allocate(nbytes);
  return std::make_shared<Storage>(Key{}, p, nbytes, device, true, Deleter{});
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device, Deleter deleter) {
  return std::make_shared<Storage>(Key{}, data, nbytes, device, false, std::move(deleter));
}

Storage::~Storage() { free_memory(); }

void Storage::free_memory() {
  if (owned_) {
    if (data_ != nullptr) allocator_for(device_).deallocate(data_, nbytes_);
    if (!released_) count_memory(device_, kind_, -int64_t(nbytes_));
  } else if (deleter_) {
    deleter_(data_);
    deleter_ = nullptr;
  }
  data_ = nullptr;
}

void Storage::release() {
  DT_CHECK_ARG(owned_, "release(): storage wraps external memory and cannot be released by dtensor");
  if (released_) return;
  free_memory();
  released_ = true;
}

void Storage::resize(size_t nbytes) {
  DT_CHECK_ARG(owned_, "resize(): storage wraps external memory (", nbytes_, " bytes) and cannot be resized");
  if (!released_ && nbytes == nbytes_) return;
  free_memory();
  released_ = true;  // counted out; if the allocation below throws, the storage stays released
  data_ = allocator_for(device_).allocate(nbytes, last_data_);  // the same address again when it is free
  last_data_ = data_;
  nbytes_ = nbytes;
  released_ = false;
  count_memory(device_, kind_, int64_t(nbytes_));
}

void Storage::set_memory_kind(MemoryKind kind) {
  DT_CHECK_ARG(kind < MemoryKind::kCount, "set_memory_kind: expected a MemoryKind below kCount, got ", int(kind));
  if (owned_ && !released_) move_memory(device_, kind_, kind, int64_t(nbytes_));
  kind_ = kind;
}

}  // namespace dt
