#include "core/stream.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/logging.h"

#if defined(DT_WITH_CUDA)
#include "core/cuda_check.h"
#endif

namespace dt {

#if defined(DT_WITH_CUDA)
namespace {

// Events come back to a per-device free list instead of being destroyed: an FSDP step records a few per group, and
// creating one is a driver call.
class EventPool {
 public:
  cudaEvent_t acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    DT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "creating an event");
    return e;
  }
  void release(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(e);
  }

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

EventPool& event_pool(const Device& device) {
  static std::mutex mu;
  static auto* pools = new std::unordered_map<int, EventPool*>();  // never destroyed: events may die at exit
  std::lock_guard<std::mutex> lock(mu);
  EventPool*& pool = (*pools)[device.index];
  if (pool == nullptr) pool = new EventPool();
  return *pool;
}

}  // namespace
#endif

namespace {

// Note [Current streams]: the calling thread's choice per CUDA device index (null: the legacy default stream).
thread_local std::vector<void*> t_current_streams;

}  // namespace

Stream current_stream(const Device& device) {
  if (device.is_cpu() || device.index < 0 || size_t(device.index) >= t_current_streams.size()) return Stream{};
  return Stream{t_current_streams[size_t(device.index)]};
}

void set_current_stream(const Device& device, Stream stream) {
  if (device.is_cpu()) {
    DT_CHECK_ARG(stream.handle == nullptr, "set_current_stream: ", device, " has no streams, got stream ",
                 stream.handle);
    return;
  }
  check_device_usable(device);
  const Stream previous = current_stream(device);
  if (previous.handle == stream.handle) return;
  const Event done = Event::record(device, previous);
  if (t_current_streams.size() <= size_t(device.index)) t_current_streams.resize(size_t(device.index) + 1, nullptr);
  t_current_streams[size_t(device.index)] = stream.handle;
  done.block(stream);
}

StreamGuard::~StreamGuard() {
  try {
    set_current_stream(device_, previous_);
  } catch (const std::exception& e) {  // a destructor must not throw; the device failed since the guard was made
    DT_LOG_WARN("StreamGuard: restoring the current stream of ", device_, ": ", e.what());
  }
}

Stream create_stream(const Device& device) {
  if (device.is_cpu()) return Stream{};
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  DT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "create_stream on ", device);
  return Stream{s};
#else
  check_device_usable(device);
  return Stream{};
#endif
}

void destroy_stream(const Device& device, Stream stream) {
  if (device.is_cpu() || stream.handle == nullptr) return;
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device);
  DT_CUDA_CHECK(cudaStreamDestroy(static_cast<cudaStream_t>(stream.handle)), "destroy_stream on ", device);
#else
  check_device_usable(device);
#endif
}

Event Event::record(const Device& device, Stream stream) {
  Event ev;
  if (device.is_cpu()) return ev;
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device);
  EventPool& pool = event_pool(device);
  cudaEvent_t e = pool.acquire();
  const cudaError_t r = cudaEventRecord(e, static_cast<cudaStream_t>(resolve_stream(stream, device).handle));
  if (r != cudaSuccess) {
    pool.release(e);
    throw_cuda_error(r, str_cat("Event::record on ", device));
  }
  ev.device_ = device;
  ev.event_ = std::shared_ptr<void>(e, [&pool](void* p) { pool.release(static_cast<cudaEvent_t>(p)); });
#else
  (void)stream;
  check_device_usable(device);
#endif
  return ev;
}

void Event::block(Stream stream) const {
  if (empty()) return;
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device_);
  DT_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(resolve_stream(stream, device_).handle),
                                    static_cast<cudaEvent_t>(handle()), 0),
                "Event::block on ", device_);
#else
  (void)stream;
#endif
}

bool Event::query() const {
  if (empty()) return true;
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device_);
  const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(handle()));
  if (r == cudaErrorNotReady) {
    cudaGetLastError();  // not an error
    return false;
  }
  cuda_check(r, str_cat("Event::query on ", device_));
#endif
  return true;
}

void Event::synchronize() const {
  if (empty()) return;
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device_);
  DT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle())), "Event::synchronize on ", device_);
#endif
}

}  // namespace dt
