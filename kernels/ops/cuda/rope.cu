// CUDA kernel of the fused rotary embedding (kernels/ops/rope.h): one thread per output element, grid-stride.
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/cuda/common.cuh"
#include "kernels/ops/functors.h"
#include "kernels/ops/rope.h"

namespace dt::kernels::cuda {

namespace {

template <typename T, typename C>
__global__ void rope_kernel(T* o, const T* x, const T* c, const T* s, int64_t n, int64_t t, int64_t hd,
                            int64_t per_table) {
  const int64_t h = hd / 2;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(blockDim.x) * gridDim.x) {
    const int64_t j = k % hd, ti = (k / hd) % t + (k / (hd * t * per_table)) * t;
    const C rot = j < h ? -C(x[k + h]) : C(x[k - h]);
    o[k] = T(C(x[k]) * C(c[ti * hd + j]) + rot * C(s[ti * hd + j]));
  }
}

}  // namespace

void rope(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t rows, int64_t t, int64_t hd,
          int64_t tables, Stream stream) {
  const int64_t n = rows * t * hd;
  ops_detail::dispatch_float_dtype("rope", x.dtype(), [&]<typename T>() {
    using C = acc_t<T>;
    rope_kernel<T, C><<<grid_for(n), 256, 0, as_cuda(stream)>>>(out.data<T>(), x.data<T>(), cos.data<T>(),
                                                                sin.data<T>(), n, t, hd, rows / tables);
  });
  check_launch("rope");
}

}  // namespace dt::kernels::cuda
