// Internal to kernels/ops/cpu: row iteration over an NdIter (kernels/ops/iter.h).
#pragma once

#include <cstdint>

#include "kernels/ops/iter.h"

namespace dt::kernels::ops_detail {

// Calls fn(off, n, st) for every innermost row: off[k] is operand k's element offset of the row's first element,
// st[k] its stride along the row, n the row length.
template <typename Fn>
inline void for_each_row(const NdIter& it, Fn&& fn) {
  if (it.numel == 0) return;
  const int inner = it.ndim - 1;
  const int64_t n = it.shape[inner];
  int64_t st[kIterMaxOperands] = {};
  for (int k = 0; k < it.nops; ++k) st[k] = it.strides[k][inner];
  int64_t idx[kIterMaxDims] = {};
  int64_t off[kIterMaxOperands] = {};
  while (true) {
    fn(static_cast<const int64_t*>(off), n, static_cast<const int64_t*>(st));
    int d = inner - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < it.shape[d]) {
        for (int k = 0; k < it.nops; ++k) off[k] += it.strides[k][d];
        break;
      }
      for (int k = 0; k < it.nops; ++k) off[k] -= it.strides[k][d] * (it.shape[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace dt::kernels::ops_detail
