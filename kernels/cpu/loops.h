// Internal to kernels/cpu: row iteration over a simplified Layout (kernels/layout.h).
#pragma once

#include <cstdint>

#include "kernels/dispatch_bits.h"
#include "kernels/layout.h"

namespace dt::kernels::cpu {

// Calls row(dst, src, n, dst_stride, src_stride) for every innermost row: `dst`/`src` point at the row's first
// element, strides are in elements. `src` may be null (one-view ops); the odometer allocates nothing.
template <typename Fn>
inline void for_each_row(const Layout& l, char* dst, size_t dst_esize, const char* src, size_t src_esize, Fn&& row) {
  if (l.numel == 0) return;
  const int inner = l.ndim - 1;
  const int64_t n = l.shape[inner];
  const int64_t ds = l.strides[0][inner], ss = l.strides[1][inner];
  int64_t idx[kMaxDims] = {};
  int64_t doff = 0, soff = 0;  // in bytes
  while (true) {
    row(dst + doff, src ? src + soff : nullptr, n, ds, ss);
    int d = inner - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < l.shape[d]) {
        doff += l.strides[0][d] * int64_t(dst_esize);
        soff += l.strides[1][d] * int64_t(src_esize);
        break;
      }
      doff -= l.strides[0][d] * int64_t(dst_esize) * (l.shape[d] - 1);
      soff -= l.strides[1][d] * int64_t(src_esize) * (l.shape[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// An unsigned integer type of `Size` bytes: same-dtype moves copy bits, never values (NaN payloads survive).
template <size_t Size>
struct Bits;
template <>
struct Bits<1> {
  using type = uint8_t;
};
template <>
struct Bits<2> {
  using type = uint16_t;
};
template <>
struct Bits<4> {
  using type = uint32_t;
};
template <>
struct Bits<8> {
  using type = uint64_t;
};

}  // namespace dt::kernels::cpu
