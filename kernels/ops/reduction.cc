#include "kernels/ops/reduction.h"

#include <algorithm>
#include <limits>

#include "core/allocator.h"
#include "kernels/ops/common.h"

namespace dt::kernels {

using namespace ops_detail;

namespace {

// A reduction brought to the canonical [outer, red, inner] form.
struct Canon {
  Tensor x;  // contiguous
  int64_t outer = 1, red = 1, inner = 1;
  Shape keep_shape;              // the result with keepdim (reduced dims as 1), whose row-major order is [outer, inner]
  Shape out_shape;               // the result as requested
  int64_t first_empty_dim = -1;  // a reduced dim of size 0, if any
};

std::vector<bool> reduced_mask(const char* op, const Tensor& x, const std::vector<int64_t>& dims) {
  int64_t nd = x.dim();
  std::vector<bool> r(size_t(nd), dims.empty());
  for (int64_t d : dims) {
    if (nd == 0) {
      DT_CHECK_ARG(d == 0 || d == -1, op, ": dim ", d, " is out of range for a 0-d tensor (expected 0 or -1)");
      continue;
    }
    int64_t w = wrap(op, d, nd);
    DT_CHECK_ARG(!r[size_t(w)], op, ": dim ", d, " appears more than once in the reduced dims");
    r[size_t(w)] = true;
  }
  return r;
}

Canon canonicalize(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, Stream stream) {
  Canon c;
  std::vector<bool> red = reduced_mask(op, x, dims);
  const Shape& sh = x.shape();
  size_t nd = sh.size();
  for (size_t d = 0; d < nd; ++d) {
    c.keep_shape.push_back(red[d] ? 1 : sh[d]);
    if (!red[d] || keepdim) c.out_shape.push_back(red[d] ? 1 : sh[d]);
    if (red[d] && sh[d] == 0 && c.first_empty_dim < 0) c.first_empty_dim = int64_t(d);
  }
  // Non-trivial dims in the pattern kept* reduced* kept* reduce in place; anything else is permuted first.
  int phase = 0;  // 0: leading kept, 1: reduced, 2: trailing kept
  bool in_place = true;
  for (size_t d = 0; d < nd; ++d) {
    if (sh[d] == 1) continue;
    if (red[d]) {
      if (phase == 2) in_place = false;
      phase = 1;
    } else if (phase == 1) {
      phase = 2;
    }
  }
  if (in_place) {
    int64_t first = -1, last = -1;
    for (size_t d = 0; d < nd; ++d)
      if (red[d] && sh[d] != 1) {
        if (first < 0) first = int64_t(d);
        last = int64_t(d);
      }
    if (first < 0) {
      c.outer = x.numel();
    } else {
      c.outer = prod(sh, 0, size_t(first));
      c.red = prod(sh, size_t(first), size_t(last) + 1);
      c.inner = prod(sh, size_t(last) + 1, nd);
    }
    c.x = x.contiguous(stream);
  } else {
    std::vector<int64_t> perm;
    for (size_t d = 0; d < nd; ++d)
      if (!red[d]) perm.push_back(int64_t(d));
    for (size_t d = 0; d < nd; ++d)
      if (red[d]) perm.push_back(int64_t(d));
    c.outer = 1;
    for (size_t d = 0; d < nd; ++d) (red[d] ? c.red : c.outer) *= sh[d];
    c.x = x.permute(perm).contiguous(stream);
  }
  return c;
}

// Runs `kind` over `dims`; `with_indices` also returns the arg indices.
ValuesIndices run_reduce(const char* op, ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims,
                         bool keepdim, bool with_indices, Stream stream) {
  check_defined(x, op, "x");
  DType dt = x.dtype();
  DType out_dt = dt;
  if (kind == ReduceKind::kSum && !is_floating(dt)) out_dt = DType::i64;
  if (kind == ReduceKind::kMean) check_floating(op, x, "x");
  Canon c = canonicalize(op, x, dims, keepdim, stream);
  Device dev = x.device();
  ValuesIndices r;
  r.values = Tensor::empty(c.keep_shape, out_dt, dev);
  if (with_indices) r.indices = Tensor::empty(c.keep_shape, DType::i64, dev);
  if (c.red == 0) {
    DT_CHECK_ARG(kind == ReduceKind::kSum || kind == ReduceKind::kMean, op, ": cannot reduce over dim ",
                 c.first_empty_dim, " of size 0 (shape ", shape_str(x.shape()), "): the reduction has no identity");
  }
  if (r.values.numel() > 0) {
    if (c.red == 0) {
      double v = kind == ReduceKind::kSum ? 0.0 : std::numeric_limits<double>::quiet_NaN();
      r.values = Tensor::full(c.keep_shape, v, out_dt, dev, stream);
    } else {
      DT_OPS_DISPATCH(dev, op, cpu::reduce(kind, c.x, c.outer, c.red, c.inner, r.values, r.indices),
                      cuda::reduce(kind, c.x, c.outer, c.red, c.inner, r.values, r.indices, stream));
    }
  }
  if (!keepdim) {
    r.values = reshape_contig(r.values, c.out_shape, stream);
    if (with_indices) r.indices = reshape_contig(r.indices, c.out_shape, stream);
  }
  return r;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  return run_reduce("sum", ReduceKind::kSum, x, dims, keepdim, false, stream).values;
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  return run_reduce("mean", ReduceKind::kMean, x, dims, keepdim, false, stream).values;
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  return run_reduce("amax", ReduceKind::kMax, x, dims, keepdim, false, stream).values;
}

Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  return run_reduce("amin", ReduceKind::kMin, x, dims, keepdim, false, stream).values;
}

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  return run_reduce("max", ReduceKind::kMax, x, {dim}, keepdim, true, stream);
}

ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  return run_reduce("min", ReduceKind::kMin, x, {dim}, keepdim, true, stream);
}

Tensor max(const Tensor& x, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  return run_reduce("max", ReduceKind::kMax, x, {}, false, false, stream).values;
}

Tensor min(const Tensor& x, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  return run_reduce("min", ReduceKind::kMin, x, {}, false, false, stream).values;
}

namespace {
Tensor arg_reduce(const char* op, ReduceKind kind, const Tensor& x, std::optional<int64_t> dim, bool keepdim,
                  Stream stream) {
  check_defined(x, op, "x");
  if (dim) return run_reduce(op, kind, x, {*dim}, keepdim, true, stream).indices;
  Tensor flat = reshape_contig(x, {x.numel()}, stream);
  Tensor idx = run_reduce(op, kind, flat, {0}, false, true, stream).indices;
  if (keepdim) idx = idx.as_strided(Shape(size_t(x.dim()), 1), Shape(size_t(x.dim()), 1), idx.offset());
  return idx;
}
}  // namespace

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  return arg_reduce("argmax", ReduceKind::kMax, x, dim, keepdim, stream);
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(x), stream);
  return arg_reduce("argmin", ReduceKind::kMin, x, dim, keepdim, stream);
}

}  // namespace dt::kernels
