// Rotary position embedding (kernels/ops/rope.h): validation, then the device's loop.
#include "kernels/ops/rope.h"

#include "core/allocator.h"
#include "core/error.h"
#include "kernels/ops/common.h"

namespace dt::kernels {

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  DT_CHECK_ARG(x.defined() && cos.defined() && sin.defined(), "rope: undefined input");
  DT_CHECK_ARG(is_floating(x.dtype()), "rope: x must be floating, got ", dtype_name(x.dtype()));
  DT_CHECK_ARG(x.dim() >= 2, "rope: x must be [..., T, head_dim], got ", shape_str(x.shape()));
  const int64_t t = x.size(-2), hd = x.size(-1);
  DT_CHECK_ARG(hd % 2 == 0, "rope: head_dim must be even, got ", hd);
  const bool per_row = cos.dim() == 3;
  const int64_t tables = per_row ? cos.size(0) : 1;
  for (const Tensor* c : {&cos, &sin})
    DT_CHECK_ARG(
        (c->shape() == Shape({t, hd}) || (per_row && x.dim() >= 3 && c->shape() == Shape({x.size(0), t, hd}))) &&
            c->dtype() == x.dtype() && c->device() == x.device(),
        "rope: cos and sin must be [", t, ", ", hd, "] or [", x.size(0), ", ", t, ", ", hd, "] ", dtype_name(x.dtype()),
        " on ", x.device().to_string(), ", got ", shape_str(c->shape()), " ", dtype_name(c->dtype()));
  DT_CHECK_ARG(cos.shape() == sin.shape(), "rope: cos ", shape_str(cos.shape()), " and sin ", shape_str(sin.shape()),
               " differ");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  const int64_t rows = out.numel() / (t * hd);
  Tensor xc = x.contiguous(stream), cc = cos.contiguous(stream), sc = sin.contiguous(stream);
  DT_OPS_DISPATCH(x.device(), "rope", cpu::rope(out, xc, cc, sc, rows, t, hd, tables),
                  cuda::rope(out, xc, cc, sc, rows, t, hd, tables, stream));
  return out;
}

}  // namespace dt::kernels
