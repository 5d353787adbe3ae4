// Tensor: reference-counted storage plus shape, strides, offset, dtype and device. Views share the storage.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace dt {

class Tensor {
 public:
  Tensor() = default;  // undefined tensor
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype);

  // ---- factories ----
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // fill_(value, stream) on a new tensor.
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu(),
                     Stream stream = {});
  // Copies `values` (converted to dtype) into a new CPU tensor of `shape`.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32);
  template <typename T>
  static Tensor from_data(const std::vector<T>& values, const Shape& shape) {
    DT_CHECK_ARG(int64_t(values.size()) == shape_numel(shape), "from_data: ", values.size(), " values given for shape ",
                 shape_str(shape), " (", shape_numel(shape), " elements expected)");
    Tensor t = empty(shape, dtype_of<T>);
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
    return t;
  }
  // Wraps external memory without copying (strides default to contiguous); `deleter` runs when the last view dies.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device, Storage::Deleter deleter = {},
                          const Shape& strides = {});
  // Deterministic random fills: element i of the contiguous order depends only on (seed, i), so every rank can
  // build the same global tensor.
  static Tensor rand(const Shape& shape, uint64_t seed, DType dtype = DType::f32, double lo = 0, double hi = 1);
  static Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32, double mean = 0, double std = 1);
  // The block of shape `block` at `offset` of rand(global, ...) / randn(global, ...), made without the rest: what one
  // rank of a sharded tensor holds (dt::rand). rand/randn are the block of the whole.
  static Tensor rand_block(const Shape& global, const Shape& offset, const Shape& block, uint64_t seed,
                           DType dtype = DType::f32, double lo = 0, double hi = 1);
  static Tensor randn_block(const Shape& global, const Shape& offset, const Shape& block, uint64_t seed,
                            DType dtype = DType::f32, double mean = 0, double std = 1);
  // Normal(mean, std) truncated to [lo, hi] (torch.nn.init.trunc_normal_'s absolute bounds), by inversion: element i
  // is the quantile of one uniform draw of (seed, i), so blocks compose as above (Note [A truncated normal by
  // inversion]).
  static Tensor trunc_normal_block(const Shape& global, const Shape& offset, const Shape& block, uint64_t seed,
                                   DType dtype, double mean, double std, double lo, double hi);
  static Tensor arange(int64_t n, DType dtype = DType::f32);

  // ---- metadata ----
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t offset() const { return offset_; }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  size_t element_size() const { return dtype_size(dtype_); }
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  Device device() const;
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Pointer to the first element (storage base + offset). Throws when the storage was released.
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    DT_CHECK_ARG(dtype_of<T> == dtype_, "tensor has dtype ", dtype_name(dtype_), ", accessed as ",
                 dtype_name(dtype_of<T>));
    return static_cast<T*>(data_ptr());
  }
  // True when both tensors view the same storage.
  bool shares_storage_with(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

  // ---- views (no copy) ----
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;  // torch.chunk semantics
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split_with_sizes(const std::vector<int64_t>& sizes, int64_t dim = 0) const;
  Tensor view(const Shape& shape) const;     // throws when the strides do not allow it; one dim may be -1
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a contiguous copy
  Tensor flatten() const { return reshape({-1}); }
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a dim; new leading dims allowed; stride 0 broadcast
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;

  // ---- copies ----
  // All run the kernels layer's strided engine (Note [The tensor engine] in core/device_ops.h). Work on a CUDA
  // device is queued on `stream` (default: the legacy default stream); copies between devices return when done.
  Tensor contiguous(Stream stream = {}) const;  // returns *this when already contiguous
  Tensor clone(Stream stream = {}) const;
  // Same shape (or broadcastable to it); casts (kernels/convert.h); across devices. Reads a snapshot when src
  // partially overlaps *this.
  Tensor& copy_(const Tensor& src, Stream stream = {});
  Tensor to(DType dtype, Stream stream = {}) const;    // returns *this when the dtype already matches
  Tensor to(Device device, Stream stream = {}) const;  // returns *this when the device already matches
  // `value` converted to the dtype (kernels/fill.h: integer dtypes reject values they cannot represent).
  Tensor& fill_(double value, Stream stream = {});
  Tensor& zero_(Stream stream = {}) { return fill_(0, stream); }

  // ---- host-side inspection (tests, printing) ----
  double item() const;                    // single-element tensors
  std::vector<double> to_vector() const;  // contiguous order, converted to double
  std::string to_string(int64_t max_per_dim = 8) const;

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;  // in elements
  DType dtype_ = DType::f32;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Test helpers. equal(): same shape, dtype and every element bit-identical (NaN equal to the same NaN bits).
bool equal(const Tensor& a, const Tensor& b);
// |a - b| <= atol + rtol * |b| elementwise (after converting both to double); shapes must match.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
double max_abs_diff(const Tensor& a, const Tensor& b);

// t's device, or the CPU for an undefined tensor (for code that runs before a validator names the problem).
inline Device device_or_cpu(const Tensor& t) { return t.defined() ? t.device() : Device::cpu(); }

}  // namespace dt
