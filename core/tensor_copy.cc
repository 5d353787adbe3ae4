// Copies, casts and fills of tensors through the kernels layer's engine (Note [The tensor engine] in
// core/device_ops.h), and host-side inspection of tensors.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "core/device_ops.h"
#include "core/tensor.h"

namespace dt {
namespace {

// Elements [first, last] of the storage that a strided view touches.
std::pair<int64_t, int64_t> element_span(const Tensor& t) {
  int64_t lo = t.offset(), hi = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t reach = (t.shape()[size_t(d)] - 1) * t.strides()[size_t(d)];
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi};
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset() == b.offset() && a.strides() == b.strides() && a.dtype() == b.dtype();
}

// Whether copying `src` into `dst` would read elements that the copy already wrote: the two share memory and are
// not the very same view (copying a view onto itself changes nothing).
bool partially_overlaps(const Tensor& dst, const Tensor& src) {
  if (dst.storage() != src.storage() || dst.numel() == 0 || same_view(dst, src)) return false;
  const auto [dlo, dhi] = element_span(dst);
  const auto [slo, shi] = element_span(src);
  const int64_t de = int64_t(dst.element_size()), se = int64_t(src.element_size());
  return dlo * de < (shi + 1) * se && slo * se < (dhi + 1) * de;
}

TensorEngine& registered_engine() {
  static TensorEngine engine;
  return engine;
}

}  // namespace

void register_tensor_engine(const TensorEngine& engine) { registered_engine() = engine; }

const TensorEngine& tensor_engine() {
  const TensorEngine& e = registered_engine();
  if (!e.copy || !e.fill)
    DT_THROW(InternalError,
             "no tensor engine is registered: Tensor copies and fills need the kernels library "
             "(link kernels_dep or libdtensor; Note [The tensor engine] in core/device_ops.h)");
  return e;
}

Tensor& Tensor::copy_(const Tensor& src, Stream stream) {
  DT_CHECK_ARG(defined() && src.defined(), "copy_: undefined tensor");
  Tensor s = src.shape() == shape_ ? src : src.expand(shape_);
  if (numel() == 0 || same_view(*this, s)) return *this;
  // a.copy_(a.t()) and the like: read from a snapshot, as if the source had been copied first.
  if (partially_overlaps(*this, s)) s = s.clone(stream);
  tensor_engine().copy(*this, s, stream);
  return *this;
}

Tensor Tensor::contiguous(Stream stream) const {
  if (is_contiguous()) return *this;
  return clone(stream);
}

Tensor Tensor::clone(Stream stream) const {
  Tensor out = empty(shape_, dtype_, device());
  out.copy_(*this, stream);
  return out;
}

Tensor Tensor::to(DType dtype, Stream stream) const {
  if (dtype == dtype_) return *this;
  DT_CHECK_ARG(is_valid_dtype(dtype), "to(): invalid dtype (value ", int(dtype), ")");
  Tensor out = empty(shape_, dtype, device());
  out.copy_(*this, stream);
  return out;
}

Tensor Tensor::to(Device device, Stream stream) const {
  if (device == this->device()) return *this;
  Tensor out = empty(shape_, dtype_, device);
  out.copy_(*this, stream);
  return out;
}

Tensor& Tensor::fill_(double value, Stream stream) {
  DT_CHECK_ARG(defined(), "fill_: undefined tensor");
  if (numel() == 0) return *this;
  tensor_engine().fill(*this, value, stream);
  return *this;
}

double Tensor::item() const {
  DT_CHECK_ARG(numel() == 1, "item(): tensor of shape ", shape_str(shape_), " has ", numel(),
               " elements, expected exactly 1");
  return to_vector()[0];
}

std::vector<double> Tensor::to_vector() const {
  Tensor c = Tensor::empty(shape_, DType::f64);
  c.copy_(*this);
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

std::string Tensor::to_string(int64_t max_per_dim) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape_str(shape_) << ", dtype=" << dtype_name(dtype_) << ", device=" << device();
  if (storage_->is_released()) return os.str() + ", storage released)";
  os << ",\n";
  std::vector<double> v = to_vector();
  Shape st = contiguous_strides(shape_);
  os << std::setprecision(6);
  // Recursive printer with elision in the middle of long dims.
  auto rec = [&](auto&& self, size_t d, int64_t off) -> void {
    if (d == shape_.size()) {
      os << v[size_t(off)];
      return;
    }
    os << '[';
    int64_t n = shape_[d];
    for (int64_t i = 0; i < n; ++i) {
      if (n > max_per_dim && i == max_per_dim / 2) {
        os << "..., ";
        i = n - max_per_dim / 2;
      }
      self(self, d + 1, off + i * st[d]);
      if (i + 1 < n) os << (d + 1 == shape_.size() ? ", " : ",\n ");
    }
    os << ']';
  };
  rec(rec, 0, 0);
  os << ')';
  return os.str();
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ac = a.to(Device::cpu()).contiguous(), bc = b.to(Device::cpu()).contiguous();
  return a.numel() == 0 || std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  DT_CHECK_ARG(a.shape() == b.shape(), "max_abs_diff: shapes differ: ", shape_str(a.shape()), " vs ",
               shape_str(b.shape()));
  std::vector<double> va = a.to_vector(), vb = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) != std::isnan(vb[i])) return INFINITY;
    if (!std::isnan(va[i]) && va[i] != vb[i]) m = std::max(m, std::fabs(va[i] - vb[i]));
  }
  return m;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  std::vector<double> va = a.to_vector(), vb = b.to_vector();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {
      if (std::isnan(va[i]) != std::isnan(vb[i])) return false;
      continue;
    }
    if (va[i] == vb[i]) continue;  // equal infinities
    if (!(std::fabs(va[i] - vb[i]) <= atol + rtol * std::fabs(vb[i]))) return false;
  }
  return true;
}

}  // namespace dt
