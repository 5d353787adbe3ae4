// Internal to kernels/: the iteration space of an elementwise operation over one or two views of the same shape,
// simplified so that loops and CUDA index math do as little as possible.
//
// Note [Layout simplification]
// An elementwise op pairs element i of dst with element i of src, so any permutation of the dims (applied to both
// views) gives the same result. We drop size-1 dims, order the dims by decreasing dst stride (so the innermost dim
// is the one contiguous in dst when there is one, and the writes run forward), then merge neighbouring dims that
// are contiguous with each other in both views. A contiguous-to-contiguous copy becomes one dim of numel elements,
// and packing a narrowed block becomes rows of memcpy-able runs.
#pragma once

#include <cstdint>
#include <cstdlib>

#include "kernels/strided_view.h"

namespace dt::kernels {

struct Layout {
  int ndim = 1;  // always >= 1 (a single element is shape [1])
  int64_t numel = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[2][kMaxDims] = {};  // [0]: dst (or the only view), [1]: src
};

// dst and src must have the same shape (checked by the caller); src may be null (one-view ops such as fill).
inline Layout make_layout(const StridedView& dst, const StridedView* src) {
  Layout l;
  l.numel = dst.numel();
  if (l.numel == 0) {
    l.shape[0] = 0;
    return l;
  }
  int nv = src ? 2 : 1;
  int dims[kMaxDims];
  int n = 0;
  for (int d = 0; d < dst.ndim; ++d)
    if (dst.shape[d] != 1) dims[n++] = d;
  auto key = [&](int d, int v) { return std::llabs(v == 0 ? dst.strides[d] : src->strides[d]); };
  // Insertion sort (at most kMaxDims dims), stable: by |dst stride| descending, then |src stride| descending.
  for (int i = 1; i < n; ++i) {
    int d = dims[i];
    int j = i;
    while (j > 0) {
      int p = dims[j - 1];
      bool before = key(d, 0) > key(p, 0) || (nv == 2 && key(d, 0) == key(p, 0) && key(d, 1) > key(p, 1));
      if (!before) break;
      dims[j] = p;
      --j;
    }
    dims[j] = d;
  }
  int m = 0;
  for (int i = 0; i < n; ++i) {
    int d = dims[i];
    if (m > 0) {
      bool mergeable = true;
      for (int v = 0; v < nv; ++v) {
        int64_t st = v == 0 ? dst.strides[d] : src->strides[d];
        if (l.strides[v][m - 1] != st * dst.shape[d]) mergeable = false;
      }
      if (mergeable) {
        l.shape[m - 1] *= dst.shape[d];
        for (int v = 0; v < nv; ++v) l.strides[v][m - 1] = v == 0 ? dst.strides[d] : src->strides[d];
        continue;
      }
    }
    l.shape[m] = dst.shape[d];
    l.strides[0][m] = dst.strides[d];
    if (nv == 2) l.strides[1][m] = src->strides[d];
    ++m;
  }
  if (m == 0) {
    l.shape[0] = 1;
    l.strides[0][0] = l.strides[1][0] = 1;
    m = 1;
  }
  l.ndim = m;
  return l;
}

}  // namespace dt::kernels
