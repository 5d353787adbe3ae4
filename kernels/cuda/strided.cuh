// Internal to kernels/cuda: strided element indexing for kernels, built from a simplified Layout.
#pragma once

#include <cstdint>

#include "kernels/layout.h"

namespace dt::kernels::cuda {

// Passed by value to kernels (about 200 bytes of parameters).
struct Indexer {
  int ndim = 1;
  int64_t shape[kMaxDims] = {};
  int64_t strides[2][kMaxDims] = {};  // [0]: dst, [1]: src, in elements

  static Indexer from(const Layout& l) {
    Indexer ix;
    ix.ndim = l.ndim;
    for (int d = 0; d < l.ndim; ++d) {
      ix.shape[d] = l.shape[d];
      ix.strides[0][d] = l.strides[0][d];
      ix.strides[1][d] = l.strides[1][d];
    }
    return ix;
  }

  // Element offsets of the i-th element (row-major over `shape`) in dst and src.
  __device__ inline void offsets(int64_t i, int64_t& dst, int64_t& src) const {
    dst = 0;
    src = 0;
#pragma unroll
    for (int k = kMaxDims - 1; k >= 0; --k) {
      if (k >= ndim) continue;
      int64_t q = k > 0 ? i / shape[k] : 0;
      int64_t r = i - q * shape[k];
      dst += r * strides[0][k];
      src += r * strides[1][k];
      i = q;
    }
  }
};

// True when both views are one contiguous run.
inline bool is_flat(const Layout& l) { return l.ndim == 1 && l.strides[0][0] == 1 && l.strides[1][0] == 1; }

}  // namespace dt::kernels::cuda
