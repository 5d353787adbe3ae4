// Copies, casts, fills and host-side inspection of tensors. CPU work is done here; device memory is moved with the
// CUDA runtime (contiguous same-dtype copies directly, anything else staged through host memory).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "core/device_ops.h"
#include "core/tensor.h"

#if defined(DT_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace dt {
namespace {

// Calls fn(dst_offset, src_offset, inner_count, inner_dst_stride, inner_src_stride) for every innermost row.
template <typename Fn>
void for_each_row(const Shape& shape, const Shape& dst_st, const Shape& src_st, Fn&& fn) {
  int64_t nd = int64_t(shape.size());
  if (shape_numel(shape) == 0) return;
  if (nd == 0) {
    fn(0, 0, 1, 1, 1);
    return;
  }
  std::vector<int64_t> idx(size_t(nd), 0);
  int64_t inner = shape[size_t(nd - 1)];
  int64_t ds = dst_st[size_t(nd - 1)], ss = src_st[size_t(nd - 1)];
  int64_t doff = 0, soff = 0;
  while (true) {
    fn(doff, soff, inner, ds, ss);
    int64_t d = nd - 2;
    for (; d >= 0; --d) {
      if (++idx[size_t(d)] < shape[size_t(d)]) {
        doff += dst_st[size_t(d)];
        soff += src_st[size_t(d)];
        break;
      }
      doff -= dst_st[size_t(d)] * (shape[size_t(d)] - 1);
      soff -= src_st[size_t(d)] * (shape[size_t(d)] - 1);
      idx[size_t(d)] = 0;
    }
    if (d < 0) return;
  }
}

template <typename D, typename S>
inline D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
    if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>)
      return D(static_cast<float>(v));
    else if constexpr (std::is_same_v<S, double>)
      return D(static_cast<float>(v));
    else
      return D(static_cast<float>(v));
  } else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
    return static_cast<D>(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

// dst and src are CPU tensors of the same shape (src possibly broadcast with zero strides).
void cpu_copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    return;
  }
  dispatch_dtype(dst.dtype(), [&]<typename D>() {
    dispatch_dtype(src.dtype(), [&]<typename S>() {
      D* dp = static_cast<D*>(dst.data_ptr());
      const S* sp = static_cast<const S*>(src.data_ptr());
      for_each_row(dst.shape(), dst.strides(), src.strides(),
                   [&](int64_t doff, int64_t soff, int64_t n, int64_t ds, int64_t ss) {
                     for (int64_t i = 0; i < n; ++i) dp[doff + i * ds] = convert<D, S>(sp[soff + i * ss]);
                   });
    });
  });
}

// Elements [first, last] of the storage that a strided view touches.
std::pair<int64_t, int64_t> element_span(const Tensor& t) {
  int64_t hi = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) hi += (t.shape()[size_t(d)] - 1) * t.strides()[size_t(d)];
  return {t.offset(), hi};
}

// Whether copying `src` into `dst` would read elements that the copy already wrote: the two share memory and are
// not the very same view (copying a view onto itself changes nothing).
bool partially_overlaps(const Tensor& dst, const Tensor& src) {
  if (dst.storage() != src.storage() || dst.numel() == 0) return false;
  if (dst.offset() == src.offset() && dst.strides() == src.strides() && dst.dtype() == src.dtype()) return false;
  const auto [dlo, dhi] = element_span(dst);
  const auto [slo, shi] = element_span(src);
  const int64_t de = int64_t(dst.element_size()), se = int64_t(src.element_size());
  return dlo * de < (shi + 1) * se && slo * se < (dhi + 1) * de;
}

#if defined(DT_WITH_CUDA)
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    DT_THROW(CudaError, what, ": ", cudaGetErrorString(e));
  }
}

// A host tensor holding a copy of the storage span of the CUDA tensor `t`, viewed with t's strides.
Tensor host_mirror(const Tensor& t) {
  auto [lo, hi] = element_span(t);
  size_t es = t.element_size();
  auto storage = Storage::create(size_t(hi - lo + 1) * es, Device::cpu());
  cudaSetDevice(t.device().index);
  cuda_check(cudaMemcpy(storage->data(), static_cast<char*>(t.storage()->data()) + lo * int64_t(es),
                        storage->nbytes(), cudaMemcpyDeviceToHost),
             "copy_ (download)");
  return Tensor(storage, t.shape(), t.strides(), t.offset() - lo, t.dtype());
}
#endif

DeviceTensorOps& registered_ops() {
  static DeviceTensorOps ops;
  return ops;
}

}  // namespace

void register_device_tensor_ops(const DeviceTensorOps& ops) { registered_ops() = ops; }
const DeviceTensorOps& device_tensor_ops() { return registered_ops(); }

Tensor& Tensor::copy_(const Tensor& src) {
  DT_CHECK_ARG(defined() && src.defined(), "copy_: undefined tensor");
  Tensor s = src.shape() == shape_ ? src : src.expand(shape_);
  if (numel() == 0) return *this;
  // a.copy_(a.t()) and the like: read from a snapshot, as if the source had been copied first.
  if (partially_overlaps(*this, s)) s = s.clone();
  Device dd = device(), sd = s.device();
  if (dd.is_cpu() && sd.is_cpu()) {
    cpu_copy(*this, s);
    return *this;
  }
#if defined(DT_WITH_CUDA)
  if (dd == sd && device_tensor_ops().copy_cast) {  // one device: strided copy and cast in a kernel
    device_tensor_ops().copy_cast(*this, s);
    return *this;
  }
  bool direct = dtype_ == s.dtype() && is_contiguous() && s.is_contiguous();
  if (direct) {
    cudaMemcpyKind kind = dd.is_cpu() ? cudaMemcpyDeviceToHost : sd.is_cpu() ? cudaMemcpyHostToDevice
                                                                              : cudaMemcpyDeviceToDevice;
    if (dd.is_cuda()) cudaSetDevice(dd.index);
    else cudaSetDevice(sd.index);
    cuda_check(cudaMemcpy(data_ptr(), s.data_ptr(), nbytes(), kind), "copy_");
    return *this;
  }
  // Stage through host memory: mirror the strided spans on the host, convert there, upload the destination span.
  Tensor host_src = sd.is_cpu() ? s : host_mirror(s);
  if (dd.is_cpu()) {
    cpu_copy(*this, host_src);
  } else {
    Tensor host_dst = host_mirror(*this);
    cpu_copy(host_dst, host_src);
    int64_t lo = element_span(*this).first;
    cudaSetDevice(dd.index);
    cuda_check(cudaMemcpy(static_cast<char*>(storage_->data()) + lo * int64_t(element_size()),
                          host_dst.storage()->data(), host_dst.storage()->nbytes(), cudaMemcpyHostToDevice),
               "copy_ (upload)");
  }
  return *this;
#else
  DT_THROW(Unsupported, "copy_ between ", sd, " and ", dd, ": dtensor was built without CUDA");
#endif
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = empty(shape_, dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  DT_CHECK_ARG(is_valid_dtype(dtype), "to(): invalid dtype (value ", int(dtype), ")");
  Tensor out = empty(shape_, dtype, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = empty(shape_, dtype_, device);
  out.copy_(*this);
  return out;
}

Tensor& Tensor::fill_(double value) {
  if (numel() == 0) return *this;
  if (device().is_cpu()) {
    dispatch_dtype(dtype_, [&]<typename T>() {
      T v = from_double<T>(value);
      T* p = static_cast<T*>(data_ptr());
      for_each_row(shape_, strides_, strides_, [&](int64_t off, int64_t, int64_t n, int64_t st, int64_t) {
        for (int64_t i = 0; i < n; ++i) p[off + i * st] = v;
      });
    });
    return *this;
  }
  if (device_tensor_ops().fill) {
    device_tensor_ops().fill(*this, value);
    return *this;
  }
  Tensor host = Tensor::empty(shape_, dtype_);
  host.fill_(value);
  return copy_(host);
}

double Tensor::item() const {
  DT_CHECK_ARG(numel() == 1, "item(): tensor of shape ", shape_str(shape_), " has ", numel(),
               " elements, expected exactly 1");
  return to_vector()[0];
}

std::vector<double> Tensor::to_vector() const {
  Tensor h = device().is_cpu() ? *this : to(Device::cpu());
  Tensor c = Tensor::empty(shape_, DType::f64);
  cpu_copy(c, h);
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
