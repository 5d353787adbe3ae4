// Streams and events on a GPU (core/stream.h), exits 77 (skipped) without one. Stream a is held back by a host
// function until the test releases it, so the order is checked without timing: an event recorded behind it is not
// complete, a stream blocked on that event does not run its copy, and after the release the copy reads what stream
// a wrote.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/cuda_check.h"
#include "core/stream.h"

namespace dt {
namespace {

void CUDART_CB hold_until_released(void* flag) {
  while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
}

// Sets the flag when the scope ends, so that a failed expectation never leaves the device held.
struct Release {
  std::atomic<bool>& flag;
  ~Release() { flag.store(true); }
};

TEST(StreamEvent, BlockOrdersAnotherStreamWithoutTheHost) {
  const Device gpu = Device::cuda(0);
  DeviceGuard guard(gpu);
  constexpr size_t kBytes = size_t(4) << 20;
  void *src = nullptr, *x = nullptr, *y = nullptr;
  DT_CUDA_CHECK(cudaMalloc(&src, kBytes));
  DT_CUDA_CHECK(cudaMalloc(&x, kBytes));
  DT_CUDA_CHECK(cudaMalloc(&y, kBytes));
  DT_CUDA_CHECK(cudaMemset(src, 0x5a, kBytes));
  DT_CUDA_CHECK(cudaMemset(x, 0x11, kBytes));
  DT_CUDA_CHECK(cudaMemset(y, 0x22, kBytes));
  DT_CUDA_CHECK(cudaDeviceSynchronize());

  Stream a = create_stream(gpu), b = create_stream(gpu);
  ASSERT_NE(a.handle, nullptr);
  ASSERT_NE(a.handle, b.handle);
  std::atomic<bool> released{false};
  Event on_a, on_b;
  {
    Release release{released};
    DT_CUDA_CHECK(cudaLaunchHostFunc(static_cast<cudaStream_t>(a.handle), hold_until_released, &released));
    DT_CUDA_CHECK(cudaMemcpyAsync(x, src, kBytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(a.handle)));
    on_a = Event::record(gpu, a);
    EXPECT_FALSE(on_a.empty());
    EXPECT_EQ(on_a.device(), gpu);
    EXPECT_FALSE(on_a.query());  // a is held
    on_a.block(b);               // returns at once: the host is not blocked
    DT_CUDA_CHECK(cudaMemcpyAsync(y, x, kBytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(b.handle)));
    on_b = Event::record(gpu, b);
    EXPECT_FALSE(on_b.query());  // b waits for a
    Event copy = on_b;           // a copy refers to the same event
    EXPECT_EQ(copy.handle(), on_b.handle());
  }
  on_b.synchronize();
  EXPECT_TRUE(on_a.query());
  EXPECT_TRUE(on_b.query());
  std::vector<uint8_t> got(kBytes);
  DT_CUDA_CHECK(cudaMemcpy(got.data(), y, kBytes, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (uint8_t v : got) wrong += v != 0x5a;
  EXPECT_EQ(wrong, 0u) << "b's copy ran before a's write";

  // A recycled event (returned to the pool by the copies above) is recorded afresh.
  on_a = Event();
  on_b = Event();
  Event again = Event::record(gpu, b);
  again.synchronize();
  EXPECT_TRUE(again.query());
  synchronize(gpu, a);
  destroy_stream(gpu, a);
  destroy_stream(gpu, b);
  DT_CUDA_CHECK(cudaFree(src));
  DT_CUDA_CHECK(cudaFree(x));
  DT_CUDA_CHECK(cudaFree(y));
}

}  // namespace
}  // namespace dt
