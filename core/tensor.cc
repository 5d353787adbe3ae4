#include "core/tensor.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace dt {

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype) {
  DT_ASSERT(shape_.size() == strides_.size());
}

namespace {
// A dim of `t` (negative counts from the end) for the view `what`: 0-d and undefined tensors have none.
int64_t dim_of(const Tensor& t, int64_t d, const char* what) {
  DT_CHECK_ARG(t.defined(), what, " of an undefined tensor");
  DT_CHECK_ARG(t.dim() > 0, what, "(dim=", d, ") of a 0-d tensor: it has no dims");
  return wrap_dim(d, t.dim(), "dim");
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) DT_CHECK_ARG(s >= 0, "tensor sizes must be non-negative, got ", shape_str(shape));
  DT_CHECK_ARG(is_valid_dtype(dtype), "invalid dtype (value ", int(dtype), ") for a tensor of shape ",
               shape_str(shape));
  const int64_t numel = shape_numel(shape);
  int64_t bytes = 0;
  DT_CHECK_ARG(!__builtin_mul_overflow(numel, int64_t(dtype_size(dtype)), &bytes), "shape ", shape_str(shape), " of ",
               dtype_name(dtype), " needs more bytes than an int64 can count");
  size_t nbytes = size_t(bytes);
  return Tensor(Storage::create(nbytes, device), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0, dtype, device); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1, dtype, device); }
Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device, Stream stream) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value, stream);
  return t;
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype) {
  DT_CHECK_ARG(int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(), " values given for shape ",
               shape_str(shape), " (", shape_numel(shape), " elements expected)");
  Tensor t = empty(shape, dtype);
  dispatch_dtype(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = from_double<T>(values[i]);
  });
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device, Storage::Deleter deleter,
                         const Shape& strides) {
  DT_CHECK_ARG(is_valid_dtype(dtype), "from_blob: invalid dtype (value ", int(dtype), ")");
  Shape st = strides.empty() && !shape.empty() ? contiguous_strides(shape) : strides;
  DT_CHECK_ARG(st.size() == shape.size(), "from_blob: ", st.size(), " strides given for ", shape.size(), " dims");
  int64_t span = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    DT_CHECK_ARG(shape[i] >= 0 && st[i] >= 0, "from_blob: negative size or stride in shape ", shape_str(shape),
                 " strides ", shape_str(st));
    if (shape[i] == 0) span = 0;
  }
  if (span != 0) {
    span = 1;
    for (size_t i = 0; i < shape.size(); ++i) span += (shape[i] - 1) * st[i];
  }
  DT_CHECK_ARG(span == 0 || data != nullptr, "from_blob: null data for shape ", shape_str(shape));
  auto storage = Storage::wrap(data, size_t(span) * dtype_size(dtype), device, std::move(deleter));
  return Tensor(std::move(storage), shape, st, 0, dtype);
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  DT_CHECK_ARG(n >= 0, "arange: n must be non-negative, got ", n);
  Tensor t = empty({n}, dtype);  // a size no memory holds fails here, as a dt::Error
  dispatch_dtype(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = from_double<T>(double(i));
  });
  return t;
}

int64_t Tensor::size(int64_t d) const { return shape_[size_t(dim_of(*this, d, "size"))]; }
int64_t Tensor::stride(int64_t d) const { return strides_[size_t(dim_of(*this, d, "stride"))]; }

Device Tensor::device() const {
  DT_CHECK_ARG(defined(), "device() of an undefined tensor");
  return storage_->device();
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (shape_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  DT_CHECK_ARG(defined(), "data_ptr() of an undefined tensor");
  DT_CHECK_ARG(!storage_->is_released(), "tensor of shape ", shape_str(shape_),
               " reads storage that was released; resize the storage before using it");
  return static_cast<char*>(storage_->data()) + offset_ * int64_t(element_size());
}

// ---- views ----

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  DT_CHECK_ARG(defined(), "view of an undefined tensor");
  DT_CHECK_ARG(shape.size() == strides.size(), "as_strided: ", strides.size(), " strides given for shape ",
               shape_str(shape));
  DT_CHECK_ARG(offset >= 0, "as_strided: negative offset ", offset);
  // Every element of the view must lie in the storage (its size is kept while the storage is released).
  int64_t last = offset;
  bool empty = false, overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    DT_CHECK_ARG(shape[i] >= 0 && strides[i] >= 0, "as_strided: negative size or stride in shape ", shape_str(shape),
                 " strides ", shape_str(strides));
    if (shape[i] == 0) empty = true;
    int64_t span = 0;
    overflow = overflow || __builtin_mul_overflow(std::max<int64_t>(shape[i] - 1, 0), strides[i], &span) ||
               __builtin_add_overflow(last, span, &last);
  }
  if (!empty) {
    const int64_t have = int64_t(storage_->nbytes() / element_size());
    DT_CHECK_ARG(!overflow && last < have, "as_strided: shape ", shape_str(shape), " strides ", shape_str(strides),
                 " at offset ", offset, " reaches element ",
                 overflow ? std::string("beyond int64") : std::to_string(last), " of a storage of ", have, " elements");
  }
  return Tensor(storage_, shape, strides, offset, dtype_);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = dim_of(*this, d, "narrow");
  int64_t n = shape_[size_t(d)];
  DT_CHECK_ARG(start >= 0 && length >= 0 && start <= n && length <= n - start, "narrow(dim=", d, ", start=", start,
               ", length=", length, ") is out of range for size ", n, " of shape ", shape_str(shape_));
  Shape sh = shape_;
  sh[size_t(d)] = length;
  return as_strided(sh, strides_, offset_ + (length > 0 ? start * strides_[size_t(d)] : 0));
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = dim_of(*this, d, "select");
  int64_t n = shape_[size_t(d)];
  DT_CHECK_ARG(index >= -n && index < n, "select(dim=", d, ", index=", index, ") is out of range for size ", n);
  if (index < 0) index += n;
  Shape sh = shape_, st = strides_;
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return as_strided(sh, st, offset_ + index * strides_[size_t(d)]);
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  DT_CHECK_ARG(chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  d = dim_of(*this, d, "chunk");
  int64_t n = shape_[size_t(d)];
  // torch.chunk: chunk size = ceil(n / chunks); may return fewer chunks than asked.
  int64_t cs = std::max<int64_t>(ceil_div(n, chunks), 1);
  return split(cs, d);
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const {
  DT_CHECK_ARG(split_size > 0, "split: split size must be positive, got ", split_size);
  d = dim_of(*this, d, "split");
  int64_t n = shape_[size_t(d)];
  std::vector<Tensor> out;
  if (n == 0) {
    out.push_back(*this);
    return out;
  }
  for (int64_t s = 0; s < n; s += split_size) out.push_back(narrow(d, s, std::min(split_size, n - s)));
  return out;
}

std::vector<Tensor> Tensor::split_with_sizes(const std::vector<int64_t>& sizes, int64_t d) const {
  d = dim_of(*this, d, "split_with_sizes");
  int64_t total = 0;
  for (int64_t s : sizes) {
    DT_CHECK_ARG(s >= 0, "split_with_sizes: sizes must be non-negative, got ", shape_str(sizes));
    total += s;
  }
  DT_CHECK_ARG(total == shape_[size_t(d)], "split_with_sizes: sizes ", shape_str(sizes), " sum to ", total, " but dim ",
               d, " has size ", shape_[size_t(d)]);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(d, start, s));
    start += s;
  }
  return out;
}

namespace {
Shape infer_shape(const Shape& shape, int64_t numel) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      DT_CHECK_ARG(infer < 0, "view/reshape: only one dim may be -1, got ", shape_str(shape));
      infer = int64_t(i);
    } else {
      DT_CHECK_ARG(out[i] >= 0, "view/reshape: invalid size in ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    DT_CHECK_ARG(known != 0 && numel % known == 0, "view/reshape: shape ", shape_str(shape),
                 " is invalid for a tensor of ", numel, " elements");
    out[size_t(infer)] = numel / known;
  }
  DT_CHECK_ARG(shape_numel(out) == numel, "view/reshape: shape ", shape_str(shape), " is invalid for a tensor of ",
               numel, " elements");
  return out;
}

// Strides for viewing (shape, strides) as new_shape without a copy, or empty when impossible (the algorithm of
// torch's computeStride: match groups of old dims that are contiguous among themselves).
bool compute_view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape, Shape* out) {
  int64_t numel = shape_numel(old_shape);
  out->assign(new_shape.size(), 0);
  if (numel <= 1) {  // empty or a single element (0-d included): any shape is a view with contiguous strides
    *out = contiguous_strides(new_shape);
    return true;
  }
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = int64_t(old_shape.size()) - 1; td >= 0; --td) {
    tensor_numel *= old_shape[size_t(td)];
    if (td == 0 ||
        (old_shape[size_t(td - 1)] != 1 && old_strides[size_t(td - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[size_t(view_d)] == 1)) {
        (*out)[size_t(view_d)] = view_numel * chunk_base_stride;
        view_numel *= new_shape[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (td > 0) {
        chunk_base_stride = old_strides[size_t(td - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape sh = infer_shape(shape, numel());
  Shape st;
  DT_CHECK_ARG(compute_view_strides(shape_, strides_, sh, &st), "view: shape ", shape_str(sh),
               " is not compatible with the strides of this tensor (shape ", shape_str(shape_), ", strides ",
               shape_str(strides_), "); use reshape(), which copies");
  return as_strided(sh, st, offset_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape sh = infer_shape(shape, numel());
  Shape st;
  if (compute_view_strides(shape_, strides_, sh, &st)) return as_strided(sh, st, offset_);
  return contiguous().view(sh);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = dim_of(*this, d0, "transpose");
  d1 = dim_of(*this, d1, "transpose");
  Shape sh = shape_, st = strides_;
  std::swap(sh[size_t(d0)], sh[size_t(d1)]);
  std::swap(st[size_t(d0)], st[size_t(d1)]);
  return as_strided(sh, st, offset_);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  DT_CHECK_ARG(int64_t(dims.size()) == dim(), "permute: ", dims.size(), " dims given for a tensor with ", dim(),
               " dims");
  std::vector<bool> seen(dims.size(), false);
  Shape sh(dims.size()), st(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim());
    DT_CHECK_ARG(!seen[size_t(d)], "permute: dim ", d, " repeated in ", shape_str(dims));
    seen[size_t(d)] = true;
    sh[i] = shape_[size_t(d)];
    st[i] = strides_[size_t(d)];
  }
  return as_strided(sh, st, offset_);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1);
  Shape sh = shape_, st = strides_;
  int64_t s = size_t(d) < shape_.size() ? strides_[size_t(d)] * shape_[size_t(d)] : 1;
  sh.insert(sh.begin() + d, 1);
  st.insert(st.begin() + d, s);
  return as_strided(sh, st, offset_);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = dim_of(*this, d, "squeeze");
  if (shape_[size_t(d)] != 1) return *this;
  Shape sh = shape_, st = strides_;
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return as_strided(sh, st, offset_);
}

Tensor Tensor::squeeze() const {
  Shape sh, st;
  for (size_t i = 0; i < shape_.size(); ++i)
    if (shape_[i] != 1) {
      sh.push_back(shape_[i]);
      st.push_back(strides_[i]);
    }
  return as_strided(sh, st, offset_);
}

Tensor Tensor::expand(const Shape& shape) const {
  DT_CHECK_ARG(shape.size() >= shape_.size(), "expand: target ", shape_str(shape), " has fewer dims than ",
               shape_str(shape_));
  size_t lead = shape.size() - shape_.size();
  Shape sh(shape.size()), st(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      DT_CHECK_ARG(shape[i] >= 0, "expand: new leading dims cannot be -1 in ", shape_str(shape));
      sh[i] = shape[i];
      st[i] = 0;
      continue;
    }
    int64_t cur = shape_[i - lead];
    DT_CHECK_ARG(shape[i] >= -1, "expand: negative size in ", shape_str(shape));
    int64_t want = shape[i] == -1 ? cur : shape[i];
    DT_CHECK_ARG(cur == want || cur == 1, "expand: cannot expand ", shape_str(shape_), " to ", shape_str(shape),
                 " (dim ", i, ": ", cur, " -> ", want, ")");
    sh[i] = want;
    st[i] = cur == want ? strides_[i - lead] : 0;
  }
  return as_strided(sh, st, offset_);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace dt
