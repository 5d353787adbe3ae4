// 16-bit floats (IEEE binary16 and bfloat16) as plain storage types with exact, round-to-nearest-even conversions.
// Arithmetic is done by converting to float; the types are trivially copyable so they can live in any buffer.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/macros.h"

namespace dt {

namespace detail {
DT_HOST_DEVICE inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
DT_HOST_DEVICE inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
}  // namespace detail

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  DT_HOST_DEVICE BFloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a builtin float type
  DT_HOST_DEVICE operator float() const { return detail::bits_float(uint32_t(bits) << 16); }
  DT_HOST_DEVICE static uint16_t from_float(float f) {
    uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN (quiet)
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;  // round to nearest, ties to even
    return uint16_t(u >> 16);
  }
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

struct Half {
  uint16_t bits = 0;
  Half() = default;
  DT_HOST_DEVICE Half(float f) : bits(from_float(f)) {}  // NOLINT
  DT_HOST_DEVICE operator float() const { return to_float(bits); }

  DT_HOST_DEVICE static uint16_t from_float(float f) {
    uint32_t u = detail::float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: infinity
    if (a < 0x38800000u) {                                  // below the smallest normal half (2^-14): subnormal
      if (a < 0x33000000u) return uint16_t(sign);           // below half the smallest subnormal (2^-25): zero
      uint32_t e = a >> 23;
      uint32_t m = (a & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126 - e;  // value = m * 2^(e-150); subnormal unit is 2^-24
      uint32_t q = m >> shift;
      uint32_t rem = m & ((1u << shift) - 1);
      uint32_t half = 1u << (shift - 1);
      if (rem > half || (rem == half && (q & 1u))) ++q;
      return uint16_t(sign | q);
    }
    // normal: rebias exponent 127 -> 15, keep 10 mantissa bits, round to nearest even on the 13 dropped bits
    uint32_t r = a - 0x38000000u;  // subtract (127-15) << 23
    uint32_t lsb = (r >> 13) & 1u;
    r += 0xfffu + lsb;
    return uint16_t(sign | (r >> 13));
  }
  DT_HOST_DEVICE static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0) {
      if (m == 0) return detail::bits_float(sign);
      // subnormal: m * 2^-24
      float v = float(m) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    if (e == 31) return detail::bits_float(sign | 0x7f800000u | (m << 13));
    return detail::bits_float(sign | ((e + 112) << 23) | (m << 13));
  }
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

}  // namespace dt
