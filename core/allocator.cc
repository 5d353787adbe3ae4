#include "core/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/shape.h"
#include "core/logging.h"

#if defined(DT_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace dt {
namespace {

// Size classes: powers of two up to 1 MiB, then multiples of 1 MiB, so that a block freed by one step of a
// training loop is reused by the same step of the next one.
size_t round_size(size_t n) {
  if (n <= 512) return 512;
  if (n < (size_t(1) << 20)) {
    size_t p = 1024;
    while (p < n) p <<= 1;
    return p;
  }
  return ceil_div(int64_t(n), int64_t(1) << 20) * (size_t(1) << 20);
}

size_t max_cached_bytes() {
  static size_t v = [] {
    const char* e = std::getenv("DT_POOL_MAX_CACHED_MB");
    long mb = e ? std::strtol(e, nullptr, 10) : 4096;
    return size_t(mb < 0 ? 0 : mb) << 20;
  }();
  return v;
}

// Note [Huge pages for large host blocks]
// Host blocks of 2 MiB and more start on a 2 MiB boundary, and their whole 2 MiB pages are marked for transparent
// huge pages (madvise; this host's THP mode is "madvise", as on most distributions, so nothing else gets them).
// Collectives between processes copy with process_vm_readv/writev, and the kernel pins every remote page of a copy:
// per 4 KiB page that is a large part of the copy's cost, per 2 MiB page it is nothing. Measured on 2 ranks
// (bench/collectives, DT_BENCH_BUFFERS=pool, with and without): all_gather 64 MiB 21-21.7 -> 16.4-16.7 ms,
// all_to_all 64 MiB 10.9-11.2 -> 8.7-8.8 ms, reduce_scatter 64 MiB 12.6-13.3 -> 10.3 ms, all_reduce 64 MiB
// 16.7 -> 13.0 ms, all_gather_inplace 16 MiB 1.7 -> 1.3 ms. Only whole huge pages inside the block are marked, so
// a block never holds more memory than it asked for (the alignment costs address // space only). DT_HUGE_PAGES=0 turns it off.
constexpr size_t kHugePage = size_t(2) << 20;

bool huge_pages_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("DT_HUGE_PAGES");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return on;
}

void* host_alloc(size_t sz) {
  if (sz < kHugePage || !huge_pages_enabled()) return std::aligned_alloc(64, sz);
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, sz) != 0) return nullptr;
  (void)madvise(p, sz & ~(kHugePage - 1), MADV_HUGEPAGE);  // advice only: a kernel without THP ignores it
  return p;
}

class CachingAllocator : public Allocator {
 public:
  explicit CachingAllocator(Device device) : device_(device) {}

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t sz = round_size(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The block of this size freed last (a multimap keeps equal keys in insertion order): the one most likely
      // still in cache. find() hands out the oldest and rotates through every cached block of the size: with 8
      // cached 1 MiB blocks, allocate + 1 MiB memcpy + free took 57 us that way, 38 us this way.
      auto [lo, hi] = free_.equal_range(sz);
      if (lo != hi) {
        auto it = std::prev(hi);
        void* p = it->second;
        free_.erase(it);
        cached_ -= sz;
        note_alloc(sz);
        return p;
      }
    }
    void* p = raw_alloc(sz);
    if (p == nullptr) {
      empty_cache();
      p = raw_alloc(sz);
    }
    if (p == nullptr) DT_THROW(SystemError, "out of memory on ", device_, ": could not allocate ", sz, " bytes");
    std::lock_guard<std::mutex> lock(mu_);
    note_alloc(sz);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    size_t sz = round_size(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      allocated_ -= sz;
      if (cached_ + sz <= max_cached_bytes()) {
        free_.emplace(sz, ptr);
        cached_ += sz;
        return;
      }
    }
    raw_free(ptr);
  }

  void empty_cache() override {
    std::multimap<size_t, void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks.swap(free_);
      cached_ = 0;
    }
    for (auto& [sz, p] : blocks) raw_free(p);
  }

  size_t allocated_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return allocated_;
  }
  size_t peak_allocated_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }
  size_t cached_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }

 private:
  void note_alloc(size_t sz) {
    allocated_ += sz;
    if (allocated_ > peak_) peak_ = allocated_;
  }

  void* raw_alloc(size_t sz) {
    if (device_.is_cpu()) return host_alloc(sz);
#if defined(DT_WITH_CUDA)
    check_device_usable(device_);
    cudaSetDevice(device_.index);
    void* p = nullptr;
    if (cudaMalloc(&p, sz) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
#else
    check_device_usable(device_);
    return nullptr;
#endif
  }

  void raw_free(void* p) {
    if (device_.is_cpu()) {
      std::free(p);
      return;
    }
#if defined(DT_WITH_CUDA)
    cudaSetDevice(device_.index);
    cudaFree(p);
#endif
  }

  Device device_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;
  size_t allocated_ = 0, peak_ = 0, cached_ = 0;
};

}  // namespace

Allocator& allocator_for(const Device& device) {
  static std::mutex mu;
  // Pools live for the whole process: storages may be destroyed during static destruction.
  static auto* pools = new std::unordered_map<Device, CachingAllocator*>();
  check_device_usable(device);
  std::lock_guard<std::mutex> lock(mu);
  auto it = pools->find(device);
  if (it == pools->end()) it = pools->emplace(device, new CachingAllocator(device)).first;
  return *it->second;
}

}  // namespace dt
