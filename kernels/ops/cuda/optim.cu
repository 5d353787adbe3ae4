// CUDA kernels of the optimizer steps (kernels/ops/optim.h): one thread per element, grid-stride.
#include <cmath>

#include "kernels/cuda/launch.cuh"
#include "kernels/ops/optim.h"

namespace dt::kernels::cuda {

namespace {

template <typename T>
__global__ void adamw_kernel(T* p, const T* g, T* m, T* v, int64_t n, T decay, T b1, T b2, T step_size, T bc2_sqrt,
                             T eps) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const T gi = g[i];
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (sqrt(vi) / bc2_sqrt + eps);
  }
}

template <typename T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, T wd, T mom, T damp, T lr, bool first, bool nesterov) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    T d = g[i] + wd * p[i];
    if (buf) {
      const T b = first ? d : mom * buf[i] + damp * d;
      buf[i] = b;
      d = nesterov ? d + mom * b : b;
    }
    p[i] -= lr * d;
  }
}

template <typename T>
void adamw_t(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& h, Stream s) {
  const int64_t n = p.numel();
  adamw_kernel<T><<<grid_for(n), 256, 0, as_cuda(s)>>>(
      p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), n, T(1 - h.lr * h.weight_decay), T(h.beta1), T(h.beta2),
      T(h.lr / (1 - std::pow(h.beta1, double(h.step)))), T(std::sqrt(1 - std::pow(h.beta2, double(h.step)))), T(h.eps));
  check_launch("adamw_step");
}

template <typename T>
void sgd_t(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& h, Stream s) {
  const int64_t n = p.numel();
  sgd_kernel<T><<<grid_for(n), 256, 0, as_cuda(s)>>>(p.data<T>(), g.data<T>(), buf.defined() ? buf.data<T>() : nullptr,
                                                     n, T(h.weight_decay), T(h.momentum), T(1 - h.dampening), T(h.lr),
                                                     h.first, h.nesterov);
  check_launch("sgd_step");
}

}  // namespace

void adamw_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& h, Stream s) {
  if (p.dtype() == DType::f64)
    adamw_t<double>(p, g, m, v, h, s);
  else
    adamw_t<float>(p, g, m, v, h, s);
}

void sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& h, Stream s) {
  if (p.dtype() == DType::f64)
    sgd_t<double>(p, g, buf, h, s);
  else
    sgd_t<float>(p, g, buf, h, s);
}

}  // namespace dt::kernels::cuda
