// Helpers of the NCCL tests: a single-rank communicator (NCCL refuses two ranks of one communicator on one GPU),
// device buffers, and a stream blocker.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "collectives/nccl/nccl_comm.h"
#include "core/error.h"
#include "tests/collectives/thread/thread_test_util.h"

namespace dt::test {

#define DT_TEST_CUDA(call)                                                 \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)

// A one-rank communicator on cuda:0, bootstrapped through an in-memory exchange.
inline std::shared_ptr<NcclCommunicator> make_single_rank(NcclOptions options = {}) {
  auto kv = std::make_shared<std::map<std::string, std::string>>();
  return NcclCommunicator::create(
      0, 1, Device::cuda(0),
      [kv](const std::string& key, const std::optional<std::string>& value) {
        if (value) (*kv)[key] = *value;
        return kv->at(key);
      },
      std::move(options));
}

// Device memory holding `bytes` (at least 1 byte so that pointers are never null).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&p_, std::max<size_t>(bytes, 1)) != cudaSuccess) throw CudaError("cudaMalloc failed in a test");
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  template <typename V>
  void upload(const V& v, size_t offset_elems = 0) {
    using T = std::remove_cvref_t<decltype(*v.data())>;
    if (!v.empty())
      if (cudaMemcpy(static_cast<T*>(p_) + offset_elems, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) !=
          cudaSuccess)
        throw CudaError("upload failed");
  }
  // std::vector<T> (HostBuf<T> for bool, which std::vector cannot hold as an array).
  template <typename T, typename V = std::conditional_t<std::is_same_v<T, bool>, HostBuf<T>, std::vector<T>>>
  V download(size_t count, size_t offset_elems = 0) const {
    V v(count);
    if (count)
      if (cudaMemcpy(v.data(), as<T>() + offset_elems, count * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
        throw CudaError("download failed");
    return v;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

// Blocks a stream (from the host) until release(): work queued after it waits.
class StreamBlocker {
 public:
  explicit StreamBlocker(cudaStream_t s) : stream_(s) {
    if (cudaLaunchHostFunc(s, &StreamBlocker::spin, &released_) != cudaSuccess) throw CudaError("cudaLaunchHostFunc");
  }
  ~StreamBlocker() {
    release();
    cudaStreamSynchronize(stream_);  // the host function reads released_: let it finish first
  }
  void release() { released_.store(true); }

 private:
  static void CUDART_CB spin(void* p) {
    auto* flag = static_cast<std::atomic<bool>*>(p);
    while (!flag->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  cudaStream_t stream_;
  std::atomic<bool> released_{false};
};

}  // namespace dt::test
