// Launch helpers shared by the CUDA kernels: grid sizing and error checking on an explicit stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/device.h"
#include "core/stream.h"

namespace dt::kernels::cuda {

// `s`, or the calling thread's current stream of the current device for the null Stream (Note [Current streams]):
// kernels are launched on the device of their tensors, made current by the caller.
inline cudaStream_t as_cuda(Stream s) {
  if (s.handle != nullptr) return static_cast<cudaStream_t>(s.handle);
  int device = 0;
  DT_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
  return static_cast<cudaStream_t>(current_stream(Device::cuda(device)).handle);
}

inline unsigned grid_for(int64_t n, unsigned block = 256) {
  int64_t g = (n + block - 1) / block;
  return unsigned(g > 65535 * 16 ? 65535 * 16 : (g < 1 ? 1 : g));
}

inline void check_launch(const char* what) { DT_CUDA_CHECK(cudaGetLastError(), what); }

}  // namespace dt::kernels::cuda
