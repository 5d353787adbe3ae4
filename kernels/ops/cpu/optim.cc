// CPU loops of the optimizer steps (kernels/ops/optim.h).
#include "kernels/ops/optim.h"

#include <cmath>

#include "kernels/cpu/parallel.h"

namespace dt::kernels::cpu {

namespace {

template <typename T>
void adamw(T* p, const T* g, T* m, T* v, int64_t n, const AdamWStep& h) {
  const T decay = T(1 - h.lr * h.weight_decay);
  const T b1 = T(h.beta1), b2 = T(h.beta2);
  const T step_size = T(h.lr / (1 - std::pow(h.beta1, double(h.step))));
  const T bc2_sqrt = T(std::sqrt(1 - std::pow(h.beta2, double(h.step))));
  const T eps = T(h.eps);
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i];
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

template <typename T>
void sgd(T* p, const T* g, T* buf, int64_t n, const SgdStep& h) {
  const T wd = T(h.weight_decay), mom = T(h.momentum), damp = T(1 - h.dampening), lr = T(h.lr);
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i] + wd * p[i];
    if (buf) {
      const T b = h.first ? d : mom * buf[i] + damp * d;
      buf[i] = b;
      d = h.nesterov ? d + mom * b : b;
    }
    p[i] -= lr * d;
  }
}

}  // namespace

void adamw_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& h) {
  parallel_for(p.numel(), 16384, [&](int64_t b, int64_t e) {
    if (p.dtype() == DType::f64)
      adamw(p.data<double>() + b, g.data<double>() + b, m.data<double>() + b, v.data<double>() + b, e - b, h);
    else
      adamw(p.data<float>() + b, g.data<float>() + b, m.data<float>() + b, v.data<float>() + b, e - b, h);
  });
}

void sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& h) {
  if (p.dtype() == DType::f64)
    sgd(p.data<double>(), g.data<double>(), buf.defined() ? buf.data<double>() : nullptr, p.numel(), h);
  else
    sgd(p.data<float>(), g.data<float>(), buf.defined() ? buf.data<float>() : nullptr, p.numel(), h);
}

}  // namespace dt::kernels::cpu
