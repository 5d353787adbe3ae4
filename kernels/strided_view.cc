#include "kernels/strided_view.h"

#include <sstream>

#include "core/error.h"

namespace dt::kernels {

bool StridedView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] == 0) return true;
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

StridedView StridedView::narrow(int dim, int64_t start, int64_t length) const {
  DT_CHECK_ARG(dim >= 0 && dim < ndim, "StridedView::narrow: dim ", dim, " out of range for ", ndim, " dims");
  DT_CHECK_ARG(start >= 0 && length >= 0 && start + length <= shape[dim], "StridedView::narrow: [", start, ", ",
               start + length, ") out of range for size ", shape[dim], " of dim ", dim);
  StridedView v = *this;
  v.shape[dim] = length;
  if (length > 0 && data) v.data = static_cast<char*>(data) + start * strides[dim] * int64_t(dtype_size(dtype));
  return v;
}

StridedView StridedView::select(int dim, int64_t index) const {
  DT_CHECK_ARG(dim >= 0 && dim < ndim, "StridedView::select: dim ", dim, " out of range for ", ndim, " dims");
  DT_CHECK_ARG(index >= 0 && index < shape[dim], "StridedView::select: index ", index, " out of range for size ",
               shape[dim], " of dim ", dim);
  StridedView v = *this;
  if (data) v.data = static_cast<char*>(data) + index * strides[dim] * int64_t(dtype_size(dtype));
  for (int d = dim; d + 1 < ndim; ++d) {
    v.shape[d] = shape[d + 1];
    v.strides[d] = strides[d + 1];
  }
  --v.ndim;
  v.shape[v.ndim] = 0;
  v.strides[v.ndim] = 0;
  return v;
}

StridedView make_view(const void* data, std::span<const int64_t> shape, std::span<const int64_t> strides, DType dtype) {
  DT_CHECK_ARG(shape.size() == strides.size(), "make_view: shape has ", shape.size(), " dims but strides have ",
               strides.size());
  DT_CHECK_ARG(shape.size() <= size_t(kMaxDims), "make_view: ", shape.size(), " dims given, at most ", kMaxDims,
               " are supported");
  StridedView v;
  v.data = const_cast<void*>(data);
  v.dtype = dtype;
  v.ndim = int(shape.size());
  for (int d = 0; d < v.ndim; ++d) {
    DT_CHECK_ARG(shape[size_t(d)] >= 0, "make_view: negative size ", shape[size_t(d)], " in dim ", d);
    v.shape[d] = shape[size_t(d)];
    v.strides[d] = strides[size_t(d)];
  }
  return v;
}

StridedView contiguous_view(const void* data, std::span<const int64_t> shape, DType dtype) {
  DT_CHECK_ARG(shape.size() <= size_t(kMaxDims), "contiguous_view: ", shape.size(), " dims given, at most ", kMaxDims,
               " are supported");
  StridedView v;
  v.data = const_cast<void*>(data);
  v.dtype = dtype;
  v.ndim = int(shape.size());
  int64_t s = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    DT_CHECK_ARG(shape[size_t(d)] >= 0, "contiguous_view: negative size ", shape[size_t(d)], " in dim ", d);
    v.shape[d] = shape[size_t(d)];
    v.strides[d] = s;
    s *= shape[size_t(d)] > 0 ? shape[size_t(d)] : 1;
  }
  return v;
}

StridedView flat_view(const void* data, int64_t count, DType dtype) {
  DT_CHECK_ARG(count >= 0, "flat_view: negative count ", count);
  StridedView v;
  v.data = const_cast<void*>(data);
  v.dtype = dtype;
  v.ndim = 1;
  v.shape[0] = count;
  v.strides[0] = 1;
  return v;
}

StridedView view_of(const Tensor& t) {
  DT_CHECK_ARG(t.defined(), "view_of: undefined tensor");
  DT_CHECK_ARG(t.dim() <= kMaxDims, "kernels support tensors of at most ", kMaxDims, " dims, got shape ",
               shape_str(t.shape()));
  StridedView v;
  v.data = t.numel() > 0 ? t.data_ptr() : nullptr;
  v.dtype = t.dtype();
  v.ndim = int(t.dim());
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = t.shape()[size_t(d)];
    v.strides[d] = t.strides()[size_t(d)];
  }
  return v;
}

void check_view(const StridedView& v, const char* what) {
  DT_CHECK_ARG(v.ndim >= 0 && v.ndim <= kMaxDims, what, ": view has ", v.ndim, " dims, expected 0 to ", kMaxDims);
  for (int d = 0; d < v.ndim; ++d) DT_CHECK_ARG(v.shape[d] >= 0, what, ": negative size in ", view_str(v));
  DT_CHECK_ARG(v.data || v.numel() == 0, what, ": null data pointer for a non-empty view ", view_str(v));
}

void check_writable_view(const StridedView& v, const char* what) {
  check_view(v, what);
  for (int d = 0; d < v.ndim; ++d)
    DT_CHECK_ARG(v.shape[d] <= 1 || v.strides[d] != 0, what, ": a written view cannot have stride 0 in dim ", d,
                 " (size ", v.shape[d], "), got ", view_str(v));
}

std::string view_str(const StridedView& v) {
  std::ostringstream os;
  os << dtype_name(v.dtype) << '[';
  for (int d = 0; d < v.ndim; ++d) os << (d ? ", " : "") << v.shape[d];
  os << "] strides [";
  for (int d = 0; d < v.ndim; ++d) os << (d ? ", " : "") << v.strides[d];
  os << ']';
  return os.str();
}

}  // namespace dt::kernels
