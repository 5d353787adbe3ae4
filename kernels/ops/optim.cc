// Optimizer steps (kernels/ops/optim.h): validation, then the device's loop.
#include "kernels/ops/optim.h"

#include "core/allocator.h"
#include "core/error.h"
#include "kernels/ops/common.h"

namespace dt::kernels {

namespace {

void check(const char* op, const Tensor& p, std::initializer_list<std::pair<const char*, const Tensor*>> others) {
  DT_CHECK_ARG(p.defined() && (p.dtype() == DType::f32 || p.dtype() == DType::f64), op,
               ": the parameter must be f32 or f64, got ", p.defined() ? dtype_name(p.dtype()) : "undefined");
  DT_CHECK_ARG(p.is_contiguous(), op, ": the parameter must be contiguous");
  for (const auto& [name, t] : others) {
    if (!t->defined()) continue;
    DT_CHECK_ARG(t->shape() == p.shape() && t->dtype() == p.dtype() && t->device() == p.device() && t->is_contiguous(),
                 op, ": ", name, " must be a contiguous ", dtype_name(p.dtype()), " tensor of shape ",
                 shape_str(p.shape()), " on ", p.device().to_string(), ", got ", dtype_name(t->dtype()), " ",
                 shape_str(t->shape()), " on ", t->device().to_string());
  }
}

}  // namespace

void adamw_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWStep& h, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(p), stream);
  check("adamw_step", p, {{"grad", &g}, {"exp_avg", &m}, {"exp_avg_sq", &v}});
  DT_CHECK_ARG(g.defined() && m.defined() && v.defined(), "adamw_step: grad and both moments are required");
  DT_CHECK_ARG(h.step >= 1, "adamw_step: step must be >= 1, got ", h.step);
  if (p.numel() == 0) return;
  DT_OPS_DISPATCH(p.device(), "adamw_step", cpu::adamw_step(p, g, m, v, h), cuda::adamw_step(p, g, m, v, h, stream));
}

void sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const SgdStep& h, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(p), stream);
  check("sgd_step", p, {{"grad", &g}, {"momentum_buffer", &buf}});
  DT_CHECK_ARG(g.defined(), "sgd_step: the gradient is required");
  DT_CHECK_ARG(h.momentum == 0 || buf.defined(), "sgd_step: momentum ", h.momentum, " needs a momentum buffer");
  if (p.numel() == 0) return;
  DT_OPS_DISPATCH(p.device(), "sgd_step", cpu::sgd_step(p, g, buf, h), cuda::sgd_step(p, g, buf, h, stream));
}

}  // namespace dt::kernels
