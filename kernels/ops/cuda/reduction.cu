// CUDA reductions over the canonical [outer, red, inner] block. inner == 1: one block per output (grid-stride over
// outputs), a block-wide tree; inner > 1: one thread per output, reading coalesced across inner.
#include <type_traits>

#include "kernels/ops/cuda/common.cuh"
#include "kernels/ops/reduction.h"

namespace dt::kernels::cuda {

using namespace ops_detail;

namespace {

template <typename T>
using sum_acc_t = std::conditional_t<is_fp_v<acc_t<T>>, acc_t<T>, int64_t>;

template <typename T, typename O>
__global__ void sum_rows_kernel(const T* x, O* out, int64_t outer, int64_t red, bool mean) {
  using A = sum_acc_t<T>;
  __shared__ A shared[32];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* row = x + o * red;
    A v = 0;
    for (int64_t r = threadIdx.x; r < red; r += blockDim.x) v += A(row[r]);
    v = block_sum(v, shared);
    if (threadIdx.x == 0) {
      if constexpr (is_fp_v<A>) {
        if (mean) v /= A(red);
      }
      out[o] = O(v);
    }
  }
}

template <typename T, typename O>
__global__ void sum_cols_kernel(const T* x, O* out, int64_t outer, int64_t red, int64_t inner, bool mean) {
  using A = sum_acc_t<T>;
  int64_t total = outer * inner;
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < total; q += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = q / inner, i = q % inner;
    const T* p = x + o * red * inner + i;
    A v = 0;
    for (int64_t r = 0; r < red; ++r) v += A(p[r * inner]);
    if constexpr (is_fp_v<A>) {
      if (mean) v /= A(red);
    }
    out[q] = O(v);
  }
}

// Whether (v, vi) replaces (best, bi): strictly better, the first NaN, or equal with a smaller index.
template <bool kMax, typename C>
__device__ inline bool better(C v, int64_t vi, C best, int64_t bi) {
  bool vn = is_nan(v), bn = is_nan(best);
  if (bn) return vn && vi < bi;
  if (vn) return true;
  if (kMax ? v > best : v < best) return true;
  return v == best && vi < bi;
}

template <bool kMax, typename T>
__global__ void minmax_rows_kernel(const T* x, T* out, int64_t* idx, int64_t outer, int64_t red) {
  using C = acc_t<T>;
  __shared__ C sv[kBlock];
  __shared__ int64_t si[kBlock];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* row = x + o * red;
    C best = C(row[0]);
    int64_t bi = 0;
    for (int64_t r = threadIdx.x; r < red; r += blockDim.x) {
      C v = C(row[r]);
      if (better<kMax>(v, r, best, bi)) {
        best = v;
        bi = r;
      }
    }
    __syncthreads();
    sv[threadIdx.x] = best;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (int(threadIdx.x) < s &&
          better<kMax>(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {
        sv[threadIdx.x] = sv[threadIdx.x + s];
        si[threadIdx.x] = si[threadIdx.x + s];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      out[o] = row[si[0]];
      if (idx) idx[o] = si[0];
    }
  }
}

template <bool kMax, typename T>
__global__ void minmax_cols_kernel(const T* x, T* out, int64_t* idx, int64_t outer, int64_t red, int64_t inner) {
  using C = acc_t<T>;
  int64_t total = outer * inner;
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < total; q += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = q / inner, i = q % inner;
    const T* p = x + o * red * inner + i;
    C best = C(p[0]);
    int64_t bi = 0;
    for (int64_t r = 1; r < red; ++r) {
      C v = C(p[r * inner]);
      if (better<kMax>(v, r, best, bi)) {
        best = v;
        bi = r;
      }
    }
    out[q] = p[bi * inner];
    if (idx) idx[q] = bi;
  }
}

unsigned blocks_for_rows(int64_t rows) { return unsigned(rows < 65535 * 16 ? (rows < 1 ? 1 : rows) : 65535 * 16); }

}  // namespace

void reduce(ReduceKind kind, const Tensor& x, int64_t outer, int64_t red, int64_t inner, const Tensor& out,
            const Tensor& indices, Stream stream) {
  cudaStream_t s = as_cuda(stream);
  dispatch_dtype(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    if (kind == ReduceKind::kSum || kind == ReduceKind::kMean) {
      bool mean = kind == ReduceKind::kMean;
      using O = std::conditional_t<is_fp_v<acc_t<T>>, T, int64_t>;
      O* po = out.data<O>();
      if (inner == 1)
        sum_rows_kernel<T, O><<<blocks_for_rows(outer), kBlock, 0, s>>>(px, po, outer, red, mean);
      else
        sum_cols_kernel<T, O><<<grid_for(outer * inner, kBlock), kBlock, 0, s>>>(px, po, outer, red, inner, mean);
    } else {
      int64_t* pi = indices.defined() ? indices.data<int64_t>() : nullptr;
      T* po = out.data<T>();
      bool is_max = kind == ReduceKind::kMax;
      if (inner == 1) {
        if (is_max)
          minmax_rows_kernel<true, T><<<blocks_for_rows(outer), kBlock, 0, s>>>(px, po, pi, outer, red);
        else
          minmax_rows_kernel<false, T><<<blocks_for_rows(outer), kBlock, 0, s>>>(px, po, pi, outer, red);
      } else {
        unsigned g = grid_for(outer * inner, kBlock);
        if (is_max)
          minmax_cols_kernel<true, T><<<g, kBlock, 0, s>>>(px, po, pi, outer, red, inner);
        else
          minmax_cols_kernel<false, T><<<g, kBlock, 0, s>>>(px, po, pi, outer, red, inner);
      }
    }
  });
  check_launch("kernels::cuda::reduce");
}

}  // namespace dt::kernels::cuda
