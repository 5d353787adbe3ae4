#include "kernels/ops/shape_ops.h"

#include <cmath>

#include "core/allocator.h"
#include "kernels/ops/common.h"

namespace dt::kernels {

using namespace ops_detail;

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim, Stream stream) {
  const StreamUseScope stream_use(tensors.empty() ? Device::cpu() : device_or_cpu(tensors[0]), stream);
  const char* op = "cat";
  DT_CHECK_ARG(!tensors.empty(), op, ": expected a non-empty list of tensors");
  std::vector<const Tensor*> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    DT_CHECK_ARG(tensors[i].defined(), op, ": tensor ", i, " is undefined");
    bool legacy_empty = tensors[i].dim() == 1 && tensors[i].size(0) == 0;
    if (!legacy_empty) parts.push_back(&tensors[i]);
  }
  if (parts.empty()) return Tensor::empty({0}, tensors[0].dtype(), tensors[0].device());
  const Tensor& ref = *parts[0];
  DT_CHECK_ARG(ref.dim() > 0, op, ": zero-dimensional tensors cannot be concatenated");
  int64_t d = wrap(op, dim, ref.dim());
  Shape shape = ref.shape();
  int64_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = *parts[i];
    DT_CHECK_ARG(t.device() == ref.device(), op, ": tensors must be on one device, got ", ref.device(), " and ",
                 t.device());
    DT_CHECK_ARG(t.dtype() == ref.dtype(), op, ": tensors must have one dtype, got ", dtype_name(ref.dtype()), " and ",
                 dtype_name(t.dtype()));
    bool ok = t.dim() == ref.dim();
    for (int64_t k = 0; ok && k < ref.dim(); ++k) ok = k == d || t.size(k) == ref.size(k);
    DT_CHECK_ARG(ok, op, ": shapes ", shape_str(ref.shape()), " and ", shape_str(t.shape()), " differ outside dim ", d);
    total += t.size(d);
  }
  shape[size_t(d)] = total;
  Tensor out = Tensor::empty(shape, ref.dtype(), ref.device());
  int64_t at = 0;
  for (const Tensor* t : parts) {
    int64_t n = t->size(d);
    if (n > 0) out.narrow(d, at, n).copy_(*t, stream);
    at += n;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  check_defined(x, "split", "x");
  std::vector<Tensor> views = x.split_with_sizes(sizes, dim);
  std::vector<Tensor> out;
  out.reserve(views.size());
  for (const Tensor& v : views) {
    Tensor c = Tensor::empty(v.shape(), v.dtype(), v.device());
    c.copy_(v, stream);
    out.push_back(c);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim, Stream stream) {
  const StreamUseScope stream_use(tensors.empty() ? Device::cpu() : device_or_cpu(tensors[0]), stream);
  const char* op = "stack";
  DT_CHECK_ARG(!tensors.empty(), op, ": expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    DT_CHECK_ARG(tensors[i].defined(), op, ": tensor ", i, " is undefined");
    DT_CHECK_ARG(tensors[i].shape() == tensors[0].shape(), op, ": all tensors must have one shape, got ",
                 shape_str(tensors[0].shape()), " and ", shape_str(tensors[i].shape()), " (tensor ", i, ")");
  }
  int64_t d = wrap(op, dim, tensors[0].dim() + 1);
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(d));
  return cat(parts, d, stream);
}

namespace {
Tensor triangle(const char* op, const Tensor& x, int64_t diagonal, bool lower, Stream stream) {
  check_defined(x, op, "x");
  DT_CHECK_ARG(x.dim() >= 2, op, ": x must have at least 2 dims, got shape ", shape_str(x.shape()));
  int64_t rows = x.size(-2), cols = x.size(-1);
  int64_t batch = x.numel() == 0 ? 0 : x.numel() / (rows * cols);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  Tensor xc = x.contiguous(stream);
  DT_OPS_DISPATCH(x.device(), op, cpu::triangle(out, xc, batch, rows, cols, diagonal, lower),
                  cuda::triangle(out, xc, batch, rows, cols, diagonal, lower, stream));
  return out;
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal, Stream stream) { return triangle("tril", x, diagonal, true, stream); }
Tensor triu(const Tensor& x, int64_t diagonal, Stream stream) { return triangle("triu", x, diagonal, false, stream); }

Tensor causal_mask(int64_t rows, int64_t cols, int64_t diagonal, Device device, Stream stream) {
  DT_CHECK_ARG(rows >= 0 && cols >= 0, "causal_mask: sizes must be non-negative, got [", rows, ", ", cols, "]");
  Tensor out = Tensor::empty({rows, cols}, DType::b8, device);
  if (out.numel() == 0) return out;
  DT_OPS_DISPATCH(device, "causal_mask", cpu::causal_mask(out, rows, cols, diagonal),
                  cuda::causal_mask(out, rows, cols, diagonal, stream));
  return out;
}

Tensor arange(double start, double end, double step, DType dtype, Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  DT_CHECK_ARG(step != 0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end),
               "arange: start, end and step must be finite and step non-zero, got start=", start, " end=", end,
               " step=", step);
  DT_CHECK_ARG((step > 0 && end >= start) || (step < 0 && end <= start), "arange: the range [", start, ", ", end,
               ") is inconsistent with step ", step);
  DT_CHECK_ARG(dtype != DType::b8, "arange: dtype bool is not supported");
  int64_t n = int64_t(std::ceil((end - start) / step));
  Tensor out = Tensor::empty({n}, dtype, device);
  if (n == 0) return out;
  DT_OPS_DISPATCH(device, "arange", cpu::arange(out, start, step), cuda::arange(out, start, step, stream));
  return out;
}

Tensor arange(int64_t end, DType dtype, Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  DT_CHECK_ARG(end >= 0, "arange: end must be non-negative, got ", end);
  return arange(0.0, double(end), 1.0, dtype, device, stream);
}

}  // namespace dt::kernels
