// Launch helpers shared by the CUDA kernels: grid sizing and error checking on an explicit stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/device.h"
#include "core/error.h"

namespace dt::kernels::cuda {

inline cudaStream_t as_cuda(Stream s) { return static_cast<cudaStream_t>(s.handle); }

inline unsigned grid_for(int64_t n, unsigned block = 256) {
  int64_t g = (n + block - 1) / block;
  return unsigned(g > 65535 * 16 ? 65535 * 16 : (g < 1 ? 1 : g));
}

inline void check_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) DT_THROW(CudaError, what, ": ", cudaGetErrorString(e));
}

}  // namespace dt::kernels::cuda
