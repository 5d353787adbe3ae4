#include "core/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/shape.h"
#include "core/stream.h"

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
  static const size_t v = size_t(config::get_int(config::Var::kPoolMaxCachedMb)) << 20;
  return v;
}

// Note [Huge pages for host blocks]
// Collectives between processes of one host copy with process_vm_readv/writev, and the kernel pins every remote
// page of a copy: per 4 KiB page that is a large part of the copy's cost, per 2 MiB page it is nothing. So host
// memory comes in transparent huge pages (madvise; this host's THP mode is "madvise", as on most distributions):
// - blocks of 2 MiB and more start on a 2 MiB boundary and their whole 2 MiB pages are marked, so a block never
//   holds more memory than it asked for (the alignment costs address space only);
// - blocks from 64 KiB to 2 MiB are cut from 2 MiB slabs, one size class per slab; the rest of a new slab goes to
//   the cache. Slab blocks stay in the pool (empty_cache() and the cache limit keep them): at most one 2 MiB slab per
//   size class beyond what the program holds at its peak;
// - smaller blocks are plain aligned_alloc blocks: a slab would keep a whole huge page resident for each of their
//   seven size classes (up to 14 MiB for a few blocks: the small GPT of bench/torch_front peaked 6 MiB higher)
//   and their copies gain nothing from it.
// Every collective between processes gains from it, from 64 KiB up (./dev bench prints the "pool" rows, buffers
// marked this way, beside the malloc'ed ones). DT_HUGE_PAGES=0 turns it off (plain aligned_alloc per block). The
// cost: the first touch of fresh huge pages can be several times slower than of 4 KiB pages; the pool keeps its
// blocks, so a loop pays it once.
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kMinSlabBlock = size_t(64) << 10;  // smaller blocks: aligned_alloc

bool huge_pages_enabled() {
  static const bool on = config::get_bool(config::Var::kHugePages);
  return on;
}

// A block of at least 2 MiB (huge pages on) or any block (off).
void* host_alloc(size_t sz) {
  if (sz < kHugePage || !huge_pages_enabled()) return std::aligned_alloc(64, sz);
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, sz) != 0) return nullptr;
  (void)madvise(p, sz & ~(kHugePage - 1), MADV_HUGEPAGE);  // advice only: a kernel without THP ignores it
  return p;
}

// The calling thread's StreamUseScope (Note [Temporaries of an op on another stream] in allocator.h).
struct UseScope {
  Device device = Device::cpu();
  Stream stream;
  bool active = false;
};
thread_local UseScope tl_use_scope;

// Note [Stream-safe frees]
// A device block may still be in use by work queued on some stream when its tensor is freed on the host: a
// collective running on NCCL's internal stream, a kernel on a user's stream. Reusing it at once would let the next
// owner's work overwrite it (or it overwrite the next owner's data). The current stream, on which tensors are made
// and copied, needs nothing: reuse on it is ordered after the earlier work anyway, also when a thread changes its
// current stream (Note [Current streams] in core/stream.h). Two threads with different current streams on one device
// are two streams: a block one frees and the other reuses is unordered unless it was recorded. For any other stream
// the user of the block calls record_stream(ptr, stream) (the NCCL backend does for every buffer of a call); when
// such a block is freed, the pool records an event on each of those streams and hands the block out again only once all
// of them fired (checked without blocking at each allocation; empty_cache() and an out-of-memory retry wait for
// them). So the host never waits for the device to free memory, and FSDP's overlap of collectives with compute
// stays correct on CUDA.
class CachingAllocator : public Allocator {
 public:
  explicit CachingAllocator(Device device, std::shared_ptr<StreamEvents> events = nullptr)
      : device_(device), events_(std::move(events)) {}
  // The process's pools live as long as it does; only a pool made for a test is destroyed, and it gives back the
  // blocks it caches (waiting for the streams of pending ones, as empty_cache() does) instead of leaking them.
  ~CachingAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override { return allocate(nbytes, nullptr); }

  void* allocate(size_t nbytes, const void* hint) override {
    if (nbytes == 0) return nullptr;
    size_t sz = round_size(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!pending_.empty()) collect_pending_locked(false);
      // The hinted block when it is among the last few cached of its size; else the block of this size freed last:
      // the one most likely still in cache. Handing out the oldest rotates through every cached block of the size:
      // with 8 cached 1 MiB blocks, allocate + 1 MiB memcpy + free took 57 us that way, 38 us this way.
      auto it = free_.find(sz);
      if (it != free_.end() && !it->second.empty()) {
        std::vector<void*>& list = it->second;
        if (hint != nullptr) {
          constexpr size_t kHintScan = 16;  // bounded: a long list is not searched
          for (size_t k = list.size(); k > 0 && list.size() - k < kHintScan; --k) {
            if (list[k - 1] == hint) {
              std::swap(list[k - 1], list.back());
              break;
            }
          }
        }
        void* p = list.back();
        list.pop_back();
        cached_ -= sz;
        note_alloc(sz);
        track_locked(p, sz);
        return p;
      }
    }
    if (device_.is_cpu() && sz >= kMinSlabBlock && sz < kHugePage && huge_pages_enabled() && !events_) {
      if (void* p = carve_slab(sz)) return p;
    }
    void* p = raw_alloc(sz);
    if (p == nullptr) {
      empty_cache();
      p = raw_alloc(sz);
    }
    if (p == nullptr) DT_THROW(SystemError, "out of memory on ", device_, ": could not allocate ", sz, " bytes");
    std::lock_guard<std::mutex> lock(mu_);
    note_alloc(sz);
    track_locked(p, sz);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    size_t sz = round_size(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      allocated_ -= sz;
      if (events_) {
        auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
        DT_ASSERT(it != live_.end(), "deallocate of a block this pool did not hand out (", ptr, ")");
        std::vector<Stream> streams = std::move(it->second.streams);
        std::vector<void*> recorded = std::move(it->second.events);
        live_.erase(it);
        if (!streams.empty() || !recorded.empty()) {  // Note [Stream-safe frees]
          Pending pend{ptr, sz, std::move(recorded)};
          for (const Stream& st : streams) pend.events.push_back(events_->record(st));
          pending_.push_back(std::move(pend));
          return;
        }
      }
      if (cached_ + sz <= max_cached_bytes() || in_slab(ptr)) {
        free_[sz].push_back(ptr);
        cached_ += sz;
        return;
      }
    }
    raw_free(ptr);
  }

  void record_stream(const void* ptr, Stream stream) override {
    if (!events_ || ptr == nullptr) return;
    const auto addr = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.upper_bound(addr);
    if (it == live_.begin()) return;
    --it;
    if (addr >= it->first + it->second.size) return;
    stream = resolve_stream(stream, device_);
    std::vector<Stream>& streams = it->second.streams;
    for (const Stream& st : streams)
      if (st.handle == stream.handle) return;
    streams.push_back(stream);
  }

  void forget_stream(Stream stream) override {
    if (!events_ || stream.handle == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [base, live] : live_) {
      auto it = std::find_if(live.streams.begin(), live.streams.end(),
                             [&](const Stream& st) { return st.handle == stream.handle; });
      if (it == live.streams.end()) continue;
      live.streams.erase(it);
      live.events.push_back(events_->record(stream));
    }
  }

  void empty_cache() override {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      collect_pending_locked(true);
      cached_ = 0;
      for (auto& [sz, list] : free_) {  // slab blocks stay (Note [Huge pages for host blocks])
        auto slab_end = std::stable_partition(list.begin(), list.end(), [&](void* p) { return in_slab(p); });
        blocks.insert(blocks.end(), slab_end, list.end());
        list.erase(slab_end, list.end());
        cached_ += sz * list.size();
      }
    }
    for (void* p : blocks) raw_free(p);
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

  // A new 2 MiB huge-page slab of blocks of `sz` bytes: returns the first, caches the others.
  void* carve_slab(size_t sz) {
    void* base = host_alloc(kHugePage);  // 2 MiB aligned and advised
    if (base == nullptr) return nullptr;
    char* b = static_cast<char*>(base);
    std::lock_guard<std::mutex> lock(mu_);
    slabs_.insert(reinterpret_cast<uintptr_t>(base));
    std::vector<void*>& list = free_[sz];
    for (size_t off = kHugePage - sz; off >= sz; off -= sz) {  // handed out from the front: b + sz first
      list.push_back(b + off);
      cached_ += sz;
    }
    note_alloc(sz);
    return b;
  }
  // Stream-ordered pools: remember a block handed out (mu_ held).
  void track_locked(void* p, size_t sz) {
    if (!events_) return;
    Live& live = live_[reinterpret_cast<uintptr_t>(p)] = Live{sz, {}, {}};
    if (tl_use_scope.active && tl_use_scope.device == device_) live.streams.push_back(tl_use_scope.stream);
  }
  // Moves freed blocks whose streams finished their work to the cache; with `wait`, waits for all (mu_ held).
  void collect_pending_locked(bool wait) {
    std::erase_if(pending_, [&](Pending& b) {
      for (void* e : b.events)
        if (wait) {
          events_->synchronize(e);
        } else if (!events_->query(e)) {
          return false;
        }
      for (void* e : b.events) events_->destroy(e);
      free_[b.size].push_back(b.ptr);
      cached_ += b.size;
      return true;
    });
  }

  // Whether `p` lies in a slab (mu_ held).
  bool in_slab(const void* p) const {
    return !slabs_.empty() && slabs_.count(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(kHugePage - 1)) != 0;
  }

  void* raw_alloc(size_t sz) {
    if (device_.is_cpu()) return host_alloc(sz);
#if defined(DT_WITH_CUDA)
    DeviceGuard guard(device_);
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
    DeviceGuard guard(device_);
    if (cudaFree(p) != cudaSuccess) cudaGetLastError();  // freeing must not throw
#endif
  }

  Device device_;
  mutable std::mutex mu_;
  // Cached blocks per size class, the one freed last at the back. Vectors keep their capacity: in a steady loop
  // allocate and free call no malloc (a multimap's nodes did, twice per block).
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::unordered_set<uintptr_t> slabs_;  // bases of the 2 MiB slabs of small host blocks
  size_t allocated_ = 0, peak_ = 0, cached_ = 0;
  // Note [Stream-safe frees]: blocks handed out (by base) with the streams recorded on them, and freed blocks
  // waiting for their events. Only for pools with events.
  std::shared_ptr<StreamEvents> events_;
  struct Live {
    size_t size;
    std::vector<Stream> streams;
    std::vector<void*> events;  // recorded by forget_stream on streams that are gone since
  };
  std::map<uintptr_t, Live> live_;
  struct Pending {
    void* ptr;
    size_t size;
    std::vector<void*> events;
  };
  std::vector<Pending> pending_;
};

#if defined(DT_WITH_CUDA)
// CUDA events for a device pool (Note [Stream-safe frees]).
class CudaStreamEvents : public StreamEvents {
 public:
  explicit CudaStreamEvents(int device) : device_(device) {}
  void* record(Stream stream) override {
    DeviceGuard guard(Device::cuda(device_));
    cudaEvent_t e = nullptr;
    cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (r == cudaSuccess) r = cudaEventRecord(e, static_cast<cudaStream_t>(stream.handle));
    if (r != cudaSuccess) {
      // No event: wait for the stream now rather than risk an early reuse.
      cudaGetLastError();
      cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle));
      cudaGetLastError();
      if (e != nullptr) cudaEventDestroy(e);
      e = nullptr;
    }
    return e;
  }
  bool query(void* event) override {
    if (event == nullptr) return true;
    const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (r == cudaSuccess) return true;
    cudaGetLastError();
    return r != cudaErrorNotReady;  // a broken context reports errors elsewhere; never keep a block forever
  }
  void synchronize(void* event) override {
    if (event != nullptr && cudaEventSynchronize(static_cast<cudaEvent_t>(event)) != cudaSuccess) cudaGetLastError();
  }
  void destroy(void* event) override {
    if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }

 private:
  int device_;
};
#endif

std::shared_ptr<StreamEvents> events_for(const Device& device) {
#if defined(DT_WITH_CUDA)
  if (device.is_cuda()) return std::make_shared<CudaStreamEvents>(device.index);
#endif
  (void)device;
  return nullptr;
}

}  // namespace

namespace {
CachingAllocator& pool_for(const Device& device) {
  static std::mutex mu;
  // Pools live for the whole process: storages may be destroyed during static destruction.
  static auto* pools = new std::unordered_map<Device, CachingAllocator*>();
  check_device_usable(device);
  std::lock_guard<std::mutex> lock(mu);
  auto it = pools->find(device);
  if (it == pools->end()) it = pools->emplace(device, new CachingAllocator(device, events_for(device))).first;
  return *it->second;
}
}  // namespace

StreamUseScope::StreamUseScope(Device device, Stream stream)
    : prev_device_(tl_use_scope.device), prev_stream_(tl_use_scope.stream), prev_active_(tl_use_scope.active) {
  // Only explicit streams other than the current one need it (current_stream is asked only then: it is the CUDA
  // runtime's on a device). An inner op on the current stream records nothing, whatever an outer scope does.
  const bool other = stream.handle != nullptr && (device.is_cpu() || current_stream(device).handle != stream.handle);
  tl_use_scope = UseScope{device, stream, other};
}

StreamUseScope::~StreamUseScope() { tl_use_scope = UseScope{prev_device_, prev_stream_, prev_active_}; }

std::unique_ptr<Allocator> make_stream_ordered_pool_for_testing(std::shared_ptr<StreamEvents> events) {
  DT_CHECK_ARG(events != nullptr, "make_stream_ordered_pool_for_testing: no StreamEvents given");
  return std::make_unique<CachingAllocator>(Device::cpu(), std::move(events));
}

Allocator& allocator_for(const Device& device) {
  if (device.is_cpu()) {  // every host tensor and scratch block: no lock, no lookup
    static CachingAllocator& host = pool_for(device);
    return host;
  }
  return pool_for(device);
}

}  // namespace dt
