// GPU spans (Note [GPU spans]): CUDA work timed by events on its stream.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/stream.h"
#include "core/trace.h"

#if defined(DT_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace dt::trace {

// Note [GPU spans]
// A CUDA op's host span covers its launch; the kernels run later, on the stream. GpuSpan records a timing event on
// the stream before the work and one after, and queues the pair; once the second event completed the span is
// written into the ring with the category "gpu" on a track per (device, stream). No host wait is added to the run:
// - Timestamps: CUDA times events only against each other (cudaEventElapsedTime, in float milliseconds). An anchor
//   event, recorded on a private stream of the device and waited for, is paired with the host clock read when that
//   wait returns; a span's ends are the anchor's host time plus their distance from it. The anchor is renewed when it
//   is over a second old at a span's start (so a float's 24 bits keep well under a microsecond), and each span keeps
//   the anchor it was made with. The pairing's error is the wait's wake-up latency, microseconds.
// - Resolution: StepSpan's end drains what finished (cudaEventQuery, no wait); stop() waits for all. The queue is
//   bounded (kMaxPending pairs): when full, the oldest half is waited for and written, so memory stays bounded in a run
//   without steps, at the price of a wait there.
// - Events come from a per-device free list (cudaEventCreate once per slot, reused).
// - A CUDA error in any of this drops the span and clears CUDA's error state: tracing never fails the traced work.
// A build without CUDA compiles GpuSpan to nothing (its constructor sees no CUDA device).

#if defined(DT_WITH_CUDA)
namespace {

constexpr size_t kMaxPending = 16384;
constexpr int64_t kAnchorAgeNs = 1'000'000'000;

struct Anchor {
  cudaEvent_t event = nullptr;
  int64_t host_ns = 0;
  ~Anchor() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

struct Pending {
  cudaEvent_t begin = nullptr, end = nullptr;
  int device = 0;
  std::shared_ptr<Anchor> anchor;
  const char* name = "";
  int32_t track = 0;
  Deferred args;
};

struct DeviceState {
  std::vector<cudaEvent_t> free_events;
  std::shared_ptr<Anchor> anchor;
  cudaStream_t anchor_stream = nullptr;
  std::map<void*, int32_t> tracks;  // stream -> track
};

struct GpuRecorder {
  std::mutex mu;
  std::map<int, DeviceState> devices;
  std::deque<Pending> pending;
};

GpuRecorder& gpu_recorder() {
  static auto* r = new GpuRecorder;  // never destroyed: spans may end during static destruction
  return *r;
}

bool ok(cudaError_t e) {
  if (e == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

cudaEvent_t take_event(DeviceState& d) {
  if (!d.free_events.empty()) {
    cudaEvent_t e = d.free_events.back();
    d.free_events.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  return ok(cudaEventCreate(&e)) ? e : nullptr;
}

// The device's anchor, renewed when older than kAnchorAgeNs. Called with the lock held and the device current.
std::shared_ptr<Anchor> anchor_of(DeviceState& d) {
  const int64_t now = now_ns();
  if (d.anchor && now - d.anchor->host_ns < kAnchorAgeNs) return d.anchor;
  if (d.anchor_stream == nullptr && !ok(cudaStreamCreateWithFlags(&d.anchor_stream, cudaStreamNonBlocking)))
    return nullptr;
  auto a = std::make_shared<Anchor>();
  if (!ok(cudaEventCreate(&a->event)) || !ok(cudaEventRecord(a->event, d.anchor_stream)) ||
      !ok(cudaEventSynchronize(a->event)))
    return nullptr;
  a->host_ns = now_ns();
  d.anchor = a;
  return a;
}

int32_t track_of(DeviceState& d, int device, void* stream) {
  auto it = d.tracks.find(stream);
  if (it != d.tracks.end()) return it->second;
  char name[64];
  std::snprintf(name, sizeof name, "cuda:%d stream %s%p", device, stream == nullptr ? "(legacy) " : "", stream);
  return d.tracks[stream] = new_track(name);
}

// Writes the oldest pending span if its work finished (or after waiting for it); false when it has not finished.
// Called with the lock held.
bool resolve_front(GpuRecorder& r, bool block) {
  Pending& p = r.pending.front();
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(p.device);
  cudaError_t e = block ? cudaEventSynchronize(p.end) : cudaEventQuery(p.end);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    cudaSetDevice(previous);
    return false;
  }
  float b_ms = 0, e_ms = 0;
  if (ok(e) && ok(cudaEventElapsedTime(&b_ms, p.anchor->event, p.begin)) &&
      ok(cudaEventElapsedTime(&e_ms, p.anchor->event, p.end))) {
    const int64_t b = p.anchor->host_ns + int64_t(double(b_ms) * 1e6),
                  en = p.anchor->host_ns + int64_t(double(e_ms) * 1e6);
    record(Category::kGpu, p.name, b, std::max(b, en), p.track, p.args);
  }
  DeviceState& d = r.devices[p.device];
  d.free_events.push_back(p.begin);
  d.free_events.push_back(p.end);
  r.pending.pop_front();
  cudaSetDevice(previous);
  return true;
}

}  // namespace

GpuSpan::GpuSpan(const char* name, int cuda_device, void* stream) noexcept : name_(name) {
  if (!enabled() || cuda_device < 0) return;
  try {
    const Device device = Device::cuda(cuda_device);
    stream_ = resolve_stream(Stream{stream}, device).handle;
    device_ = device.index;
    GpuRecorder& r = gpu_recorder();
    std::lock_guard<std::mutex> lock(r.mu);
    DeviceGuard guard(device);
    DeviceState& d = r.devices[device.index];
    std::shared_ptr<Anchor> anchor = anchor_of(d);
    cudaEvent_t b = take_event(d);
    if (anchor == nullptr || b == nullptr) {
      if (b != nullptr) d.free_events.push_back(b);
      return;
    }
    if (!ok(cudaEventRecord(b, static_cast<cudaStream_t>(stream_)))) {
      d.free_events.push_back(b);
      return;
    }
    begin_ = b;
    anchor_ = std::move(anchor);
  } catch (...) {
    begin_ = nullptr;  // no usable device: no span
  }
}

GpuSpan::~GpuSpan() {
  if (begin_ == nullptr) return;
  try {
    GpuRecorder& r = gpu_recorder();
    std::lock_guard<std::mutex> lock(r.mu);
    DeviceGuard guard(Device::cuda(device_));
    DeviceState& d = r.devices[device_];
    auto give_back = [&](cudaEvent_t e) {
      if (e != nullptr) d.free_events.push_back(e);
    };
    cudaEvent_t e = take_event(d);
    if (e == nullptr || !ok(cudaEventRecord(e, static_cast<cudaStream_t>(stream_)))) {
      give_back(static_cast<cudaEvent_t>(begin_));
      give_back(e);
      return;
    }
    r.pending.push_back(Pending{static_cast<cudaEvent_t>(begin_), e, device_, std::static_pointer_cast<Anchor>(anchor_),
                                name_, track_of(d, device_, stream_), args_});
    if (r.pending.size() >= kMaxPending)
      for (size_t n = kMaxPending / 2; n > 0 && !r.pending.empty(); --n) resolve_front(r, true);
  } catch (...) {
  }
}

void drain_gpu_spans(bool block) {
  GpuRecorder& r = gpu_recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  while (!r.pending.empty() && resolve_front(r, block)) {
  }
}

#else

GpuSpan::GpuSpan(const char* name, int, void*) noexcept : name_(name) {}
GpuSpan::~GpuSpan() = default;
void drain_gpu_spans(bool) {}

#endif

}  // namespace dt::trace
