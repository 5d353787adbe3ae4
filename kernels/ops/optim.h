// Optimizer steps on local tensors (one parameter's shard), updated in place: AdamW and SGD with momentum, with
// PyTorch's formulas (torch.optim.AdamW / SGD, single-tensor form). Every tensor is contiguous, on one device, with
// the parameter's floating dtype (f32 or f64); the arithmetic is in that dtype. CUDA work is queued on `stream`.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/tensor.h"

namespace dt::kernels {

struct AdamWStep {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  int64_t step = 1;  // 1 for the first step (bias correction)
};
// p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamWStep& h, Stream stream = {});

struct SgdStep {
  double lr = 1e-2, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first = true;  // the momentum buffer is initialised to the gradient on the first step
};
// g += wd p; buf = first ? g : momentum buf + (1 - dampening) g; g = nesterov ? g + momentum buf : buf; p -= lr g.
// momentum_buf is undefined when momentum == 0.
void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const SgdStep& h,
              Stream stream = {});

namespace cpu {
void adamw_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& h);
void sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& h);
}  // namespace cpu
namespace cuda {
void adamw_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& h, Stream stream);
void sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& h, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
