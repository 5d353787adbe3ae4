#include "kernels/ops/common.h"

#include <type_traits>

#include "core/allocator.h"

#if defined(DT_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace dt::kernels::ops_detail {

void check_defined(const Tensor& t, const char* op, const char* name) {
  DT_CHECK_ARG(t.defined(), op, ": ", name, " is an undefined tensor");
}

Device common_device(const char* op, std::initializer_list<const Tensor*> ts,
                     std::initializer_list<const char*> names) {
  const Tensor* first = nullptr;
  const char* first_name = "";
  auto name_it = names.begin();
  for (const Tensor* t : ts) {
    const char* name = name_it != names.end() ? *name_it++ : "tensor";
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      first_name = name;
      continue;
    }
    DT_CHECK_ARG(t->device() == first->device(), op, ": tensors must be on one device, got ", first_name, " on ",
                 first->device(), " and ", name, " on ", t->device());
  }
  DT_CHECK_ARG(first, op, ": no defined input tensor");
  return first->device();
}

void check_same_dtype(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  DT_CHECK_ARG(a.dtype() == b.dtype(), op, ": ", a_name, " and ", b_name, " must have the same dtype, got ",
               dtype_name(a.dtype()), " and ", dtype_name(b.dtype()), " (convert one with Tensor::to)");
}

void check_floating(const char* op, const Tensor& t, const char* name) {
  DT_CHECK_ARG(is_floating(t.dtype()), op, ": ", name, " must have a floating dtype (f32, f64, f16, bf16), got ",
               dtype_name(t.dtype()));
}

void check_integer(const char* op, const Tensor& t, const char* name) {
  DType d = t.dtype();
  DT_CHECK_ARG(!is_floating(d) && d != DType::b8, op, ": ", name,
               " must have an integer dtype (i8, i32, i64, u8), got ", dtype_name(d));
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    DT_CHECK_ARG(sa == sb || sa == 1 || sb == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                 " cannot be broadcast together (dim ", int64_t(i) - int64_t(n), " has sizes ", sa, " and ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

void check_max_dims(const char* op, const Tensor& t, int max_dims) {
  DT_CHECK_ARG(t.dim() <= max_dims, op, ": at most ", max_dims, " dims are supported, got a tensor of shape ",
               shape_str(t.shape()));
}

Tensor reshape_contig(const Tensor& t, const Shape& shape, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(t), stream);
  DT_ASSERT(shape_numel(shape) == t.numel(), "reshape_contig ", shape_str(t.shape()), " -> ", shape_str(shape));
  Tensor c = t.contiguous(stream);
  return c.as_strided(shape, contiguous_strides(shape), c.offset());
}

void throw_no_cuda(const char* op, const Device& device) {
  DT_THROW(Unsupported, op, " on ", device, ": dtensor was built without CUDA");
}

int64_t wrap(const char* op, int64_t dim, int64_t ndim) {
  std::string what = str_cat(op, ": dim");
  return wrap_dim(dim, ndim, what.c_str());
}

int64_t prod(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < s.size(); ++i) p *= s[i];
  return p;
}

IdsCheck check_ids_cpu(const Tensor& ids, int64_t hi, std::optional<int64_t> ignore) {
  IdsCheck r;
  int64_t n = ids.numel();
  dispatch_dtype(ids.dtype(), [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T* p = ids.data<T>();
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = int64_t(p[i]);
        if (ignore && v == *ignore) continue;
        ++r.valid;
        if ((v < 0 || v >= hi) && r.bad_pos < 0) {
          r.bad_pos = i;
          r.bad_value = v;
        }
      }
    } else {
      DT_ASSERT(false, "check_ids on dtype ", dtype_name(ids.dtype()));
    }
  });
  return r;
}

IdsCheck check_ids(const Tensor& ids, int64_t hi, std::optional<int64_t> ignore, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(ids), stream);
  DT_ASSERT(ids.is_contiguous());
  if (ids.numel() == 0) return {};
  Device dev = ids.device();
  IdsCheck r;
  DT_OPS_DISPATCH(dev, "check_ids", r = check_ids_cpu(ids, hi, ignore), r = check_ids_cuda(ids, hi, ignore, stream));
  return r;
}

}  // namespace dt::kernels::ops_detail
