// Internal to kernels/ops/cuda: grid-stride loops, block reductions and typed dispatch shared by the op kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/dispatch_bits.h"
#include "kernels/layout.h"
#include "kernels/ops/functors.h"

namespace dt::kernels::cuda {

inline constexpr int kBlock = 256;

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
template <typename A>
__device__ inline A block_sum(A v, A* shared /* >= 32 */) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  A r = lane < nwarps ? shared[lane] : A(0);
  for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  return r;
}

// NaN-propagating maximum over the block; every thread gets the result.
template <typename A>
__device__ inline A block_max(A v, A* shared) {
  auto mx = [](A a, A b) { return (a != a || a > b) ? a : b; };
  for (int o = 16; o > 0; o >>= 1) v = mx(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  A r = lane < nwarps ? shared[lane] : v;
  for (int o = 16; o > 0; o >>= 1) r = mx(r, __shfl_xor_sync(0xffffffffu, r, o));
  return r;
}

inline int64_t grid_stride_blocks(int64_t n) { return int64_t(grid_for(n, kBlock)); }

}  // namespace dt::kernels::cuda
