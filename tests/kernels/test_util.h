// Test helpers for the kernels: random data, element access by explicit index arithmetic, and conversion
// references written independently of kernels/convert.h and core/half.h (16-bit rounding by table search).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace dt::kernels::testing {

inline std::vector<DType> all_dtypes() {
  return {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8, DType::i32, DType::i64, DType::u8, DType::b8};
}
inline std::vector<DType> float_dtypes() { return {DType::f32, DType::f64, DType::f16, DType::bf16}; }
inline bool is_int_dtype(DType t) { return !is_floating(t) && t != DType::b8; }
inline bool is_signed_int(DType t) { return t == DType::i8 || t == DType::i32 || t == DType::i64; }

// ---- raw element access: pointer + sum(index[d] * stride[d]) * element size ----
inline char* element_ptr(const Tensor& t, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  return static_cast<char*>(t.storage()->data()) + (t.offset() + off) * int64_t(t.element_size());
}
inline uint64_t load_bits(const void* p, size_t size) {
  uint64_t b = 0;
  std::memcpy(&b, p, size);
  return b;
}
inline void store_bits(void* p, uint64_t b, size_t size) { std::memcpy(p, &b, size); }

// Calls fn(index, linear) for every index of `shape` in row-major order.
inline void for_each_index(const Shape& shape, const std::function<void(const std::vector<int64_t>&, int64_t)>& fn) {
  int64_t n = shape_numel(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t r = lin;
    for (size_t d = shape.size(); d-- > 0;) {
      idx[d] = r % shape[d];
      r /= shape[d];
    }
    fn(idx, lin);
  }
}

// ---- exact decoding of stored values (independent of core/half.h) ----
inline double half_value(uint16_t h) {
  int sign = (h >> 15) & 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0)
    v = std::ldexp(double(m), -24);
  else if (e == 31)
    v = m ? std::nan("") : INFINITY;
  else
    v = std::ldexp(double(1024 + m), e - 25);
  return sign ? -v : v;
}
inline double bf16_value(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even of a float value to the 16-bit format whose non-negative encodings 0..inf_bits are
// increasing in value; infinity is treated as the next power of two for rounding (IEEE overflow rule).
inline uint16_t ref_round16(float x, uint16_t inf_bits, double (*value)(uint16_t), double inf_as) {
  if (std::isnan(x)) return uint16_t(inf_bits | 1);  // some NaN: compared by NaN-ness only
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(double(x));
  auto val = [&](uint32_t h) { return h == inf_bits ? inf_as : value(uint16_t(h)); };
  if (a >= inf_as) return uint16_t(sign | inf_bits);
  uint32_t lo = 0, hi = inf_bits;  // val(lo) <= a < val(hi)
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (val(mid) <= a)
      lo = mid;
    else
      hi = mid;
  }
  double dl = a - val(lo), dh = val(hi) - a;
  uint32_t r = dl < dh ? lo : dh < dl ? hi : ((lo & 1) == 0 ? lo : hi);
  return uint16_t(sign | r);
}
inline uint16_t ref_to_half(float x) { return ref_round16(x, 0x7c00, half_value, 65536.0); }
inline uint16_t ref_to_bf16(float x) { return ref_round16(x, 0x7f80, bf16_value, std::ldexp(1.0, 128)); }

// The exact value of a stored element (integers as double: exact below 2^53, which the tests keep to).
inline double exact_value(const void* p, DType t) {
  switch (t) {
    case DType::f32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::f64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::f16:
      return half_value(uint16_t(load_bits(p, 2)));
    case DType::bf16:
      return bf16_value(uint16_t(load_bits(p, 2)));
    case DType::i8:
      return double(int8_t(load_bits(p, 1)));
    case DType::i32:
      return double(int32_t(uint32_t(load_bits(p, 4))));
    case DType::i64:
      return double(int64_t(load_bits(p, 8)));
    case DType::u8:
      return double(load_bits(p, 1));
    case DType::b8:
      return load_bits(p, 1) ? 1.0 : 0.0;
  }
  return 0;
}
inline int64_t exact_int(const void* p, DType t) {
  switch (t) {
    case DType::i8:
      return int8_t(load_bits(p, 1));
    case DType::i32:
      return int32_t(uint32_t(load_bits(p, 4)));
    case DType::i64:
      return int64_t(load_bits(p, 8));
    case DType::u8:
      return int64_t(load_bits(p, 1));
    case DType::b8:
      return load_bits(p, 1) ? 1 : 0;
    default:
      return int64_t(exact_value(p, t));
  }
}

// Bits of the integer v wrapped (two's complement) to the width of integer dtype t.
inline uint64_t wrap_bits(int64_t v, DType t) {
  size_t es = dtype_size(t);
  return es == 8 ? uint64_t(v) : (uint64_t(v) & ((uint64_t(1) << (8 * es)) - 1));
}

// Reference conversion of a source element (given by its exact value, or its integer for integer sources) to dst.
// Returns the destination bits (NaN: any NaN bits; compare with same_value()).
inline uint64_t ref_convert(double v, bool src_integral, int64_t iv, DType dst) {
  switch (dst) {
    case DType::f64: {
      uint64_t b;
      std::memcpy(&b, &v, 8);
      return b;
    }
    case DType::f32: {
      float f = float(v);
      return load_bits(&f, 4);
    }
    case DType::f16:
      return ref_to_half(float(v));
    case DType::bf16:
      return ref_to_bf16(float(v));
    case DType::b8:
      return (std::isnan(v) || v != 0) ? 1 : 0;
    default:
      return wrap_bits(src_integral ? iv : int64_t(std::trunc(v)), dst);
  }
}

// Bit equality, except that any NaN equals any NaN of a floating dtype.
inline bool same_value(uint64_t got, uint64_t want, DType t) {
  if (got == want) return true;
  if (!is_floating(t)) return false;
  return std::isnan(exact_value(&got, t)) && std::isnan(exact_value(&want, t));
}

// ---- random data ----
// Fills every element of a contiguous tensor with random bits (bool: 0 or 1).
inline void fill_random_bits(const Tensor& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t es = t.element_size();
  char* p = static_cast<char*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t b = rng();
    if (t.dtype() == DType::b8) b &= 1;
    store_bits(p + i * int64_t(es), b, es);
  }
}

// Stores `v` into a contiguous element of dtype t (v must fit; floats rounded by the hardware / core types).
inline void store_value(void* p, double v, DType t) {
  dispatch_dtype(t, [&]<typename T>() {
    T x = from_double<T>(v);
    std::memcpy(p, &x, sizeof(T));
  });
}

// A contiguous tensor of random values in [lo, hi] (integers: rounded toward zero), with some exact zeros.
inline Tensor random_values(const Shape& shape, DType t, uint64_t seed, double lo, double hi) {
  Tensor out = Tensor::empty(shape, t);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  char* p = static_cast<char*>(out.data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i) {
    double v = (rng() % 8 == 0) ? 0.0 : u(rng);
    if (!is_floating(t)) v = std::trunc(v);
    if (t == DType::b8) v = v != 0;
    store_value(p + i * int64_t(out.element_size()), v, t);
  }
  return out;
}

inline std::string case_name(DType a, DType b) { return std::string(dtype_name(a)) + "<-" + dtype_name(b); }

}  // namespace dt::kernels::testing
