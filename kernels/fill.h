// Fill: every element of a buffer or a strided view set to one scalar, for any dtype.
//
// The scalar is converted to the destination dtype once, on the host, by the rules of kernels/convert.h; the value
// must be representable (an integer dtype rejects NaN, infinities and out-of-range values; floating dtypes accept
// anything, overflowing to infinity). Pointers live on `device`; CUDA work is queued on `stream`, CPU work runs
// synchronously. No call allocates.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/convert.h"
#include "kernels/strided_view.h"

namespace dt::kernels {

// An integer or floating-point number that keeps integers exact (a double cannot hold every int64).
class Scalar {
 public:
  template <typename T>
  requires std::is_arithmetic_v<T> Scalar(T v)
      : integral_(std::is_integral_v<T>) {  // NOLINT: implicit, like the number it holds
    if constexpr (std::is_integral_v<T>)
      i_ = static_cast<int64_t>(v);
    else
      d_ = static_cast<double>(v);
  }
  Scalar(Half v) : d_(static_cast<float>(v)) {}      // NOLINT
  Scalar(BFloat16 v) : d_(static_cast<float>(v)) {}  // NOLINT

  bool is_integral() const { return integral_; }
  int64_t as_int64() const { return integral_ ? i_ : static_cast<int64_t>(d_); }
  double as_double() const { return integral_ ? static_cast<double>(i_) : d_; }
  template <typename T>
  T to() const {
    return integral_ ? convert<T, int64_t>(i_) : convert<T, double>(d_);
  }

 private:
  bool integral_ = false;
  int64_t i_ = 0;
  double d_ = 0;
};

void fill(void* dst, int64_t count, DType dtype, Scalar value, Device device, Stream stream = {});
void fill(const StridedView& dst, Scalar value, Device device, Stream stream = {});
void fill(const Tensor& dst, Scalar value, Stream stream = {});

// Throws InvalidArgument when `value` cannot be represented in `dtype` (see above).
void check_fill_value(Scalar value, DType dtype);
// `value` converted to `dtype`, as the bit pattern in the low dtype_size(dtype) bytes (what the kernels store).
uint64_t scalar_bits(Scalar value, DType dtype);

namespace cpu {
void fill(const StridedView& dst, uint64_t bits);
}  // namespace cpu

namespace cuda {
void fill(const StridedView& dst, uint64_t bits, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
