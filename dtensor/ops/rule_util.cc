#include "dtensor/ops/rule_util.h"

#include <limits>

#include "kernels/ops/elementwise.h"
#include "kernels/ops/reduction.h"

namespace dt::ops::detail {

int64_t aligned_dim(const Shape& in, const Shape& out, int64_t out_dim) {
  const int64_t lead = int64_t(out.size()) - int64_t(in.size());
  const int64_t d = out_dim - lead;
  if (d < 0) return -1;
  return in[size_t(d)] == out[size_t(out_dim)] ? d : -1;
}

Shape broadcast_shapes(const std::string& op, const std::vector<Shape>& shapes) {
  size_t nd = 0;
  for (const Shape& s : shapes) nd = std::max(nd, s.size());
  Shape out(nd, 1);
  for (const Shape& s : shapes) {
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t& o = out[nd - s.size() + k];
      const int64_t v = s[k];
      if (v == o || v == 1) continue;
      if (o == 1) {
        o = v;
        continue;
      }
      std::string all;
      for (const Shape& t : shapes) all += (all.empty() ? "" : ", ") + shape_str(t);
      DT_THROW(InvalidArgument, "dt::", op, ": shapes ", all, " do not broadcast (sizes ", o, " and ", v,
               " meet in dim ", k, " of ", shape_str(s), ")");
    }
  }
  return out;
}

namespace {
std::string name_of(size_t i, const std::vector<std::string>& names) {
  return i < names.size() ? names[i] : "input " + std::to_string(i);
}
}  // namespace

void check_same_dtype(const OpSchema& s, size_t i, size_t j, const std::vector<std::string>& names) {
  DT_CHECK_ARG(s.inputs[i].dtype == s.inputs[j].dtype, "dt::", s.op, ": ", name_of(i, names), " is ",
               dtype_name(s.inputs[i].dtype), " but ", name_of(j, names), " is ", dtype_name(s.inputs[j].dtype),
               " (no type promotion: convert one with dt::to first)");
}

void check_floating(const OpSchema& s, size_t i, const std::string& name) {
  DT_CHECK_ARG(is_floating(s.inputs[i].dtype), "dt::", s.op, ": ", name, " must have a floating dtype, got ",
               dtype_name(s.inputs[i].dtype));
}

void check_integer(const OpSchema& s, size_t i, const std::string& name) {
  const DType t = s.inputs[i].dtype;
  DT_CHECK_ARG(t == DType::i8 || t == DType::i32 || t == DType::i64 || t == DType::u8, "dt::", s.op, ": ", name,
               " must have an integer dtype (i8, i32, i64, u8), got ", dtype_name(t));
}

void check_defined_input(const OpSchema& s, size_t i, const std::string& name) {
  DT_CHECK_ARG(i < s.inputs.size() && s.inputs[i].defined, "dt::", s.op, ": ", name, " is undefined");
}

int64_t wrap(const OpSchema& s, int64_t dim, int64_t ndim, const char* what) {
  DT_CHECK_ARG((ndim == 0 && (dim == 0 || dim == -1)) || (dim >= -ndim && dim < ndim), "dt::", s.op, ": ", what, " ",
               dim, " is out of range for a ", ndim, "-d tensor (expected [", -std::max<int64_t>(ndim, 1), ", ",
               std::max<int64_t>(ndim, 1) - 1, "])");
  if (ndim == 0) return 0;
  return dim < 0 ? dim + ndim : dim;
}

Tensor identity_tensor(const Shape& shape, DType dtype, Device device, ReduceOp op) {
  Tensor t = Tensor::empty(shape, dtype);
  dispatch_dtype(dtype, [&]<typename T>() {
    T v{};
    if constexpr (std::is_same_v<T, bool>) {
      v = (op == ReduceOp::kMin || op == ReduceOp::kProduct);
    } else if constexpr (std::is_integral_v<T>) {
      v = op == ReduceOp::kMax       ? std::numeric_limits<T>::lowest()
          : op == ReduceOp::kMin     ? std::numeric_limits<T>::max()
          : op == ReduceOp::kProduct ? T(1)
                                     : T(0);
    } else {
      const double inf = std::numeric_limits<double>::infinity();
      v = from_double<T>(op == ReduceOp::kMax ? -inf : op == ReduceOp::kMin ? inf : op == ReduceOp::kProduct ? 1 : 0);
    }
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = v;
  });
  return t.to(device);
}

Tensor reshape_rowmajor(const Tensor& t, const Shape& shape) {
  DT_ASSERT(shape_numel(shape) == t.numel(), "reshape_rowmajor ", shape_str(t.shape()), " -> ", shape_str(shape));
  if (t.shape() == shape) return t;
  Tensor c = t.contiguous();
  return c.as_strided(shape, contiguous_strides(shape), c.offset());
}

int64_t count_true(const Tensor& mask) { return int64_t(kernels::sum(mask).to(Device::cpu()).item()); }

Tensor outside(const Tensor& x, int64_t lo, int64_t hi) {
  Tensor below = kernels::compare_scalar(kernels::CompareOp::kLt, x, double(lo));
  Tensor above = kernels::compare_scalar(kernels::CompareOp::kGe, x, double(hi));
  return kernels::where(below, below, above);
}

LocalRows local_rows(const Tensor& ids, int64_t begin, int64_t count) {
  Tensor shifted = kernels::sub_scalar(ids.to(DType::i64), double(begin));
  Tensor foreign = outside(shifted, 0, count);
  return LocalRows{kernels::masked_fill(shifted, foreign, 0), foreign};
}

}  // namespace dt::ops::detail
