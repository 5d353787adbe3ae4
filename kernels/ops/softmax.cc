#include "kernels/ops/softmax.h"

#include "core/allocator.h"
#include "kernels/ops/common.h"

namespace dt::kernels {

using namespace ops_detail;

namespace {

struct Rows {
  int64_t outer = 1, n = 1, inner = 1;
};

Rows rows_of(const char* op, const Tensor& x, int64_t dim) {
  Rows r;
  if (x.dim() == 0) {
    DT_CHECK_ARG(dim == 0 || dim == -1, op, ": dim ", dim, " is out of range for a 0-d tensor (expected 0 or -1)");
    return r;
  }
  int64_t d = wrap(op, dim, x.dim());
  r.outer = prod(x.shape(), 0, size_t(d));
  r.n = x.shape()[size_t(d)];
  r.inner = prod(x.shape(), size_t(d) + 1, x.shape().size());
  return r;
}

Tensor forward(const char* op, const Tensor& x, int64_t dim, bool log, Stream stream) {
  check_defined(x, op, "x");
  check_floating(op, x, "x");
  Rows r = rows_of(op, x, dim);
  Tensor xc = x.contiguous(stream);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  DT_OPS_DISPATCH(x.device(), op, cpu::softmax(out, xc, r.outer, r.n, r.inner, log),
                  cuda::softmax(out, xc, r.outer, r.n, r.inner, log, stream));
  return out;
}

Tensor backward(const char* op, const Tensor& grad_out, const Tensor& out, int64_t dim, bool log, Stream stream) {
  check_defined(grad_out, op, "grad_out");
  check_defined(out, op, "out");
  Device dev = common_device(op, {&grad_out, &out}, {"grad_out", "out"});
  check_floating(op, out, "out");
  check_same_dtype(op, grad_out, "grad_out", out, "out");
  DT_CHECK_ARG(grad_out.shape() == out.shape(), op, ": grad_out has shape ", shape_str(grad_out.shape()),
               " but out has shape ", shape_str(out.shape()), " (they must match)");
  Rows r = rows_of(op, out, dim);
  Tensor gc = grad_out.contiguous(stream), oc = out.contiguous(stream);
  Tensor gx = Tensor::empty(out.shape(), out.dtype(), dev);
  if (gx.numel() == 0) return gx;
  DT_OPS_DISPATCH(dev, op, cpu::softmax_backward(gx, gc, oc, r.outer, r.n, r.inner, log),
                  cuda::softmax_backward(gx, gc, oc, r.outer, r.n, r.inner, log, stream));
  return gx;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, Stream stream) { return forward("softmax", x, dim, false, stream); }
Tensor log_softmax(const Tensor& x, int64_t dim, Stream stream) { return forward("log_softmax", x, dim, true, stream); }
Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim, Stream stream) {
  return backward("softmax_backward", grad_out, out, dim, false, stream);
}
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(grad_out), stream);
  return backward("log_softmax_backward", grad_out, out, dim, true, stream);
}

}  // namespace dt::kernels
