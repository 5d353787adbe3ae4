#include "core/dtype.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/reduce.h"
#include "kernels/reduce_op_impl.h"

namespace dt::kernels::cuda {

namespace {
template <typename T>
__global__ void reduce_kernel(T* out, const T* a, const T* b, int64_t n, ReduceOp op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = apply_reduce<T>(op, a[i], b[i]);
}
template <typename T>
__global__ void divide_kernel(T* x, int64_t n, int64_t divisor) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = apply_divide<T>(x[i], divisor);
}
}  // namespace

void reduce(void* out, const void* a, const void* b, int64_t count, DType dtype, ReduceOp op, Stream stream) {
  dispatch_dtype(dtype, [&]<typename T>() {
    reduce_kernel<T><<<grid_for(count), 256, 0, as_cuda(stream)>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                                   static_cast<const T*>(b), count, op);
  });
  check_launch("kernels::cuda::reduce");
}

void divide_by(void* x, int64_t count, DType dtype, int64_t divisor, Stream stream) {
  dispatch_dtype(dtype, [&]<typename T>() {
    divide_kernel<T><<<grid_for(count), 256, 0, as_cuda(stream)>>>(static_cast<T*>(x), count, divisor);
  });
  check_launch("kernels::cuda::divide_by");
}

}  // namespace dt::kernels::cuda
