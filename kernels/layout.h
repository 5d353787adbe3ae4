// Internal to kernels/: the one iteration space of the elementwise work on one device, over up to kMaxOperands views
// of the same shape (operand 0 is the destination): copies, casts and fills (kernels/copy.h, kernels/fill.h) and the
// broadcasting elementwise ops (kernels/ops/elementwise.h), CPU loops and CUDA kernels alike (a Layout is passed to
// a kernel by value).
//
// Note [Layout simplification]
// An elementwise op pairs element i of the destination with element i of every source, so any permutation of the
// dims (applied to every operand) gives the same result. We drop size-1 dims, order the dims by decreasing
// destination stride (ties by the sources' strides, in operand order), so the innermost dim is the one contiguous in
// the destination when there is one and the writes run forward, then merge neighbouring dims that are contiguous
// with each other in every operand: dims d (outer) and e (inner) merge when stride_k[d] == stride_k[e] * shape[e]
// for every operand k. A contiguous-to-contiguous copy becomes one dim of numel elements, and packing a narrowed
// block becomes rows of memcpy-able runs.
//
// Broadcast operands (stride 0, from expand()) obey the same rule: two dims that are both broadcast merge (0 == 0 * n),
// a broadcast dim never merges with one that is not, so a broadcast source row stays a row of stride 0 (the loops
// test for it). Negative strides merge the same way (-s * n == (-s) * n). The ops write a fresh row-major output,
// whose strides strictly decrease over the dims of size > 1, so for them the ordering changes nothing and the result
// is the merge of neighbouring dims in their own order. Every view may have up to kMaxDims dims once size-1 dims are
// dropped and neighbours merged in their given order (Tensors may have more dims than a StridedView; the Tensor
// front end merges before it counts).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <initializer_list>

#include "core/error.h"
#include "core/macros.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "kernels/strided_view.h"

namespace dt::kernels {

inline constexpr int kMaxOperands = 4;

struct Layout {
  int ndim = 1;  // always >= 1 (a single element is shape [1])
  int nops = 1;
  int64_t numel = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};  // in elements; [0]: the destination (or the only view)
};

namespace layout_detail {

// The simplification of Note [Layout simplification] over `ndim` dims of `shape`; strides[k] are operand k's.
// `what` names the caller in the error for too many dims.
inline Layout simplify(int64_t ndim, const int64_t* shape, const int64_t* const* strides, int nops, const char* what) {
  DT_ASSERT(nops >= 1 && nops <= kMaxOperands, "layout of ", nops, " operands");
  Layout l;
  l.nops = nops;
  l.numel = 1;
  for (int64_t d = 0; d < ndim; ++d) l.numel *= shape[d];
  if (l.numel == 0) {
    l.shape[0] = 0;
    return l;
  }
  // 1. Drop size-1 dims and merge neighbours in the given order, so that views of more than kMaxDims dims work.
  Layout pre;
  int n = 0;
  for (int64_t d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; merge && k < nops; ++k) merge = pre.strides[k][n - 1] == strides[k][d] * shape[d];
    if (merge) {
      pre.shape[n - 1] *= shape[d];
      for (int k = 0; k < nops; ++k) pre.strides[k][n - 1] = strides[k][d];
      continue;
    }
    DT_CHECK_ARG(n < kMaxDims, what, ": at most ", kMaxDims, " non-mergeable dims are supported, got shape ",
                 shape_str(Shape(shape, shape + ndim)));
    pre.shape[n] = shape[d];
    for (int k = 0; k < nops; ++k) pre.strides[k][n] = strides[k][d];
    ++n;
  }
  // 2. Stable insertion sort (at most kMaxDims dims) by |stride| descending, operand 0 first.
  int dims[kMaxDims];
  for (int i = 0; i < n; ++i) dims[i] = i;
  auto before = [&](int a, int b) {
    for (int k = 0; k < nops; ++k) {
      int64_t sa = std::llabs(pre.strides[k][a]), sb = std::llabs(pre.strides[k][b]);
      if (sa != sb) return sa > sb;
    }
    return false;
  };
  for (int i = 1; i < n; ++i) {
    int d = dims[i];
    int j = i;
    for (; j > 0 && before(d, dims[j - 1]); --j) dims[j] = dims[j - 1];
    dims[j] = d;
  }
  // 3. Merge neighbours again in the new order.
  int m = 0;
  for (int i = 0; i < n; ++i) {
    int d = dims[i];
    bool merge = m > 0;
    for (int k = 0; merge && k < nops; ++k) merge = l.strides[k][m - 1] == pre.strides[k][d] * pre.shape[d];
    if (merge) {
      l.shape[m - 1] *= pre.shape[d];
      for (int k = 0; k < nops; ++k) l.strides[k][m - 1] = pre.strides[k][d];
      continue;
    }
    l.shape[m] = pre.shape[d];
    for (int k = 0; k < nops; ++k) l.strides[k][m] = pre.strides[k][d];
    ++m;
  }
  if (m == 0) {  // one element
    l.shape[0] = 1;
    for (int k = 0; k < nops; ++k) l.strides[k][0] = 1;
    m = 1;
  }
  l.ndim = m;
  return l;
}

}  // namespace layout_detail

// Views of one shape (checked by the caller); views[0] is the destination.
inline Layout make_layout(std::initializer_list<const StridedView*> views) {
  const int64_t* strides[kMaxOperands] = {};
  int k = 0;
  DT_ASSERT(views.size() >= 1 && views.size() <= size_t(kMaxOperands), "layout of ", views.size(), " views");
  for (const StridedView* v : views) strides[k++] = v->strides;
  const StridedView& dst = **views.begin();
  return layout_detail::simplify(dst.ndim, dst.shape, strides, k, "layout");
}

// dst and src must have the same shape (checked by the caller); src may be null (one-view ops such as fill).
inline Layout make_layout(const StridedView& dst, const StridedView* src) {
  return src ? make_layout({&dst, src}) : make_layout({&dst});
}

// Tensors of one shape (sources broadcast with expand()); ts[0] is the destination. `op` names the caller in errors.
inline Layout make_layout(const char* op, std::initializer_list<const Tensor*> ts) {
  const int64_t* strides[kMaxOperands] = {};
  int k = 0;
  DT_ASSERT(ts.size() >= 1 && ts.size() <= size_t(kMaxOperands), op, ": layout of ", ts.size(), " tensors");
  const Shape& shape = (*ts.begin())->shape();
  for (const Tensor* t : ts) {
    DT_ASSERT(t->shape() == shape, op, ": operand shape ", shape_str(t->shape()), " vs ", shape_str(shape));
    strides[k++] = t->strides().data();
  }
  return layout_detail::simplify(int64_t(shape.size()), shape.data(), strides, k, op);
}

// Calls row(off, n, st) for every innermost row of `l`: off[k] is operand k's element offset of the row's first
// element, st[k] its stride along the row (in elements), n the row length. Host code; allocates nothing.
template <typename Fn>
inline void for_each_row(const Layout& l, Fn&& row) {
  if (l.numel == 0) return;
  const int inner = l.ndim - 1;
  const int64_t n = l.shape[inner];
  int64_t st[kMaxOperands] = {};
  for (int k = 0; k < l.nops; ++k) st[k] = l.strides[k][inner];
  int64_t idx[kMaxDims] = {};
  int64_t off[kMaxOperands] = {};
  while (true) {
    row(static_cast<const int64_t*>(off), n, static_cast<const int64_t*>(st));
    int d = inner - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < l.shape[d]) {
        for (int k = 0; k < l.nops; ++k) off[k] += l.strides[k][d];
        break;
      }
      for (int k = 0; k < l.nops; ++k) off[k] -= l.strides[k][d] * (l.shape[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// Element offsets of linear index i (row-major over l.shape) for operands 0 .. N-1 (CUDA kernels: one thread per
// element).
template <int N>
DT_HOST_DEVICE inline void layout_offsets(const Layout& l, int64_t i, int64_t* off) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    const int64_t q = d > 0 ? i / l.shape[d] : 0;
    const int64_t r = i - q * l.shape[d];
    for (int k = 0; k < N; ++k) off[k] += r * l.strides[k][d];
    i = q;
  }
}

// True when every operand is one contiguous run (a flat loop, no index arithmetic).
DT_HOST_DEVICE inline bool is_flat(const Layout& l) {
  if (l.ndim != 1) return false;
  for (int k = 0; k < l.nops; ++k)
    if (l.strides[k][0] != 1) return false;
  return true;
}

}  // namespace dt::kernels
