// The one check for CUDA runtime calls (CUDA builds only; the guard for the current device is DeviceGuard in
// core/device.h).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/error.h"

namespace dt {

// Clears CUDA's last error (a failed call leaves it set for the next unrelated check) and throws CudaError
// "<what>: <CUDA's name for the error>: <CUDA's message>".
[[noreturn]] void throw_cuda_error(cudaError_t error, const std::string& what);

// For a status already in hand (an event query, a callback's result): throws as DT_CUDA_CHECK does.
inline void cuda_check(cudaError_t error, const std::string& what) {
  if (error != cudaSuccess) throw_cuda_error(error, what);
}

}  // namespace dt

// DT_CUDA_CHECK(cudaMemcpyAsync(...)) or DT_CUDA_CHECK(cudaMemcpyAsync(...), "UCX staging of ", desc): throws
// CudaError naming the context (when given), the call and CUDA's message.
#define DT_CUDA_CHECK(call, ...)                                                                   \
  do {                                                                                             \
    const cudaError_t dt_cuda_err_ = (call);                                                       \
    if (dt_cuda_err_ != cudaSuccess)                                                               \
      ::dt::throw_cuda_error(dt_cuda_err_, ::dt::str_cat(__VA_ARGS__ __VA_OPT__(, ": ", ) #call)); \
  } while (0)
