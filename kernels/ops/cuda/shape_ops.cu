// CUDA tril/triu, causal mask and arange: one thread per element.
#include "kernels/ops/cuda/common.cuh"
#include "kernels/ops/shape_ops.h"

namespace dt::kernels::cuda {

namespace {

template <typename U>
__global__ void triangle_kernel(U* out, const U* x, int64_t total, int64_t rows, int64_t cols, int64_t diagonal,
                                bool lower) {
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < total; q += int64_t(gridDim.x) * blockDim.x) {
    int64_t j = q % cols, i = (q / cols) % rows;
    bool keep = lower ? j - i <= diagonal : j - i >= diagonal;
    out[q] = keep ? x[q] : U(0);
  }
}

__global__ void causal_mask_kernel(bool* out, int64_t rows, int64_t cols, int64_t diagonal) {
  int64_t total = rows * cols;
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < total; q += int64_t(gridDim.x) * blockDim.x)
    out[q] = (q % cols) - (q / cols) <= diagonal;
}

template <typename T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_double<T>(start + double(i) * step);
}

}  // namespace

void triangle(const Tensor& out, const Tensor& x, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal,
              bool lower, Stream stream) {
  int64_t total = batch * rows * cols;
  auto run = [&]<typename U>() {
    triangle_kernel<U><<<grid_for(total, kBlock), kBlock, 0, as_cuda(stream)>>>(
        static_cast<U*>(out.data_ptr()), static_cast<const U*>(x.data_ptr()), total, rows, cols, diagonal, lower);
  };
  dispatch_bits(x.element_size(), run);  // zero bits are 0 in every dtype
  check_launch("kernels::cuda::triangle");
}

void causal_mask(const Tensor& out, int64_t rows, int64_t cols, int64_t diagonal, Stream stream) {
  causal_mask_kernel<<<grid_for(rows * cols, kBlock), kBlock, 0, as_cuda(stream)>>>(out.data<bool>(), rows, cols,
                                                                                    diagonal);
  check_launch("kernels::cuda::causal_mask");
}

void arange(const Tensor& out, double start, double step, Stream stream) {
  int64_t n = out.numel();
  dispatch_dtype(out.dtype(), [&]<typename T>() {
    arange_kernel<T><<<grid_for(n, kBlock), kBlock, 0, as_cuda(stream)>>>(out.data<T>(), n, start, step);
  });
  check_launch("kernels::cuda::arange");
}

}  // namespace dt::kernels::cuda
