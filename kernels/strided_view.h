// StridedView: a non-owning description of a strided block of memory (pointer, shape, strides in elements, dtype),
// the argument type of the data-movement kernels (pack/unpack, copy, chunk-cat, fill).
//
// Fixed-capacity arrays instead of vectors: building, narrowing and passing views allocates nothing, so the
// kernels can sit on hot paths (every redistribution step, every FSDP unshard) and the view can be passed by value
// to a CUDA kernel.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"

namespace dt::kernels {

inline constexpr int kMaxDims = 8;

struct StridedView {
  void* data = nullptr;  // the first element (element [0, ..., 0])
  DType dtype = DType::f32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements; may be 0 (broadcast) in a source

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  // Row-major contiguous (size-1 dims may have any stride; empty views are contiguous).
  bool is_contiguous() const;
  std::span<const int64_t> sizes() const { return {shape, size_t(ndim)}; }
  std::span<const int64_t> stride_span() const { return {strides, size_t(ndim)}; }

  // Views of a view (no copy, no allocation); arguments are checked like Tensor::narrow / select.
  StridedView narrow(int dim, int64_t start, int64_t length) const;
  StridedView select(int dim, int64_t index) const;
};

// Builds views; throws InvalidArgument for mismatched ranks, negative sizes or more than kMaxDims dims. Views do
// not track constness: a view of const memory may be passed only where the kernel reads (a source).
StridedView make_view(const void* data, std::span<const int64_t> shape, std::span<const int64_t> strides, DType dtype);
// A row-major contiguous view of `shape`.
StridedView contiguous_view(const void* data, std::span<const int64_t> shape, DType dtype);
// A 1-d contiguous view of `count` elements.
StridedView flat_view(const void* data, int64_t count, DType dtype);
// The view of a tensor's elements (its data_ptr(), shape, strides, dtype). The tensor keeps owning the memory.
StridedView view_of(const Tensor& t);

// Validates a view given by a user: rank in [0, kMaxDims], non-negative sizes, non-null data when non-empty.
// `what` names the argument in the message ("pack: src").
void check_view(const StridedView& v, const char* what);
// Additionally for views that are written: no dim of size > 1 with stride 0 (two elements in one place).
void check_writable_view(const StridedView& v, const char* what);

std::string view_str(const StridedView& v);  // "f32[4, 3] strides [1, 4]"

}  // namespace dt::kernels
