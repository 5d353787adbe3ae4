// GPU spans (Note [GPU spans] in core/trace_gpu.cc) on a GPU; exits 77 (skipped) without one. The stream is held by
// a host function for 50 ms before the traced copy, so a span timed on the host (the launch) and one timed by events
// (the copy's execution) differ by those 50 ms: the test tells them apart without trusting a duration.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "core/cuda_check.h"
#include "core/stream.h"
#include "core/trace.h"

namespace dt {
namespace {

void CUDART_CB hold_until_released(void* flag) {
  while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
}

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("dt_trace_gpu_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

const trace::Event* find(const std::vector<trace::Event>& ev, trace::Category c, const std::string& name) {
  for (const trace::Event& e : ev)
    if (e.category == c && name == e.name) return &e;
  return nullptr;
}

TEST(TraceGpu, EventsTimeTheWorkNotTheLaunch) {
  const Device gpu = Device::cuda(0);
  DeviceGuard guard(gpu);
  constexpr size_t kBytes = size_t(256) << 20;
  void *x = nullptr, *y = nullptr;
  DT_CUDA_CHECK(cudaMalloc(&x, kBytes));
  DT_CUDA_CHECK(cudaMalloc(&y, kBytes));
  const Stream s = create_stream(gpu);
  const std::string dir = temp_dir("order");
  trace::start({.dir = dir, .rank = 0, .world_size = 1, .capacity = 4096});
  std::atomic<bool> released{false};
  DT_CUDA_CHECK(cudaLaunchHostFunc(static_cast<cudaStream_t>(s.handle), hold_until_released, &released));
  {
    trace::Span launch(trace::Category::kUser, "launch");
    trace::GpuSpan copy("copy", gpu.index, s.handle);
    EXPECT_TRUE(copy.active());
    DT_CUDA_CHECK(cudaMemcpyAsync(y, x, kBytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s.handle)));
  }
  trace::drain_gpu_spans(false);  // the copy has not run: nothing to write yet, and no wait
  EXPECT_EQ(find(trace::snapshot(), trace::Category::kGpu, "copy"), nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  released.store(true);
  trace::drain_gpu_spans(true);
  const std::vector<trace::Event> ev = trace::snapshot();
  const trace::Event* launch = find(ev, trace::Category::kUser, "launch");
  const trace::Event* copy = find(ev, trace::Category::kGpu, "copy");
  ASSERT_NE(launch, nullptr);
  ASSERT_NE(copy, nullptr);
  EXPECT_GE(copy->begin_ns - launch->end_ns, 40'000'000) << "the copy started when the stream was released";
  EXPECT_GT(copy->end_ns, copy->begin_ns);
  EXPECT_LT(copy->end_ns - copy->begin_ns, 40'000'000) << "a 256 MiB device copy";
  EXPECT_NE(copy->track, launch->track);
  const std::string path = trace::stop();
  EXPECT_TRUE(std::filesystem::exists(path));
  synchronize(gpu, s);
  destroy_stream(gpu, s);
  DT_CUDA_CHECK(cudaFree(x));
  DT_CUDA_CHECK(cudaFree(y));
  std::filesystem::remove_all(dir);
}

// More spans than the queue holds (16384) without a step: the queue resolves its oldest half itself, every span
// reaches the ring, in order on the stream's track.
TEST(TraceGpu, TheQueueStaysBounded) {
  const Device gpu = Device::cuda(0);
  DeviceGuard guard(gpu);
  void* x = nullptr;
  DT_CUDA_CHECK(cudaMalloc(&x, 4096));
  const std::string dir = temp_dir("bounded");
  constexpr int kSpans = 40000;
  trace::start({.dir = dir, .rank = 0, .world_size = 1, .capacity = kSpans + 100});
  for (int i = 0; i < kSpans; ++i) {
    trace::GpuSpan span("memset", gpu.index, nullptr);
    DT_CUDA_CHECK(cudaMemsetAsync(x, i & 0xff, 4096, static_cast<cudaStream_t>(current_stream(gpu).handle)));
  }
  trace::drain_gpu_spans(true);
  int n = 0;
  int64_t last_begin = 0;
  bool ordered = true;
  for (const trace::Event& e : trace::snapshot()) {
    if (e.category != trace::Category::kGpu) continue;
    ++n;
    ordered = ordered && e.begin_ns >= last_begin;
    last_begin = e.begin_ns;
  }
  EXPECT_EQ(n, kSpans);
  EXPECT_TRUE(ordered);
  trace::stop();
  DT_CUDA_CHECK(cudaFree(x));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dt
