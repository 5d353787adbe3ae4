#include "kernels/fill.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/allocator.h"
#include "core/error.h"

namespace dt::kernels {

void check_fill_value(Scalar value, DType dtype) {
  dispatch_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      constexpr int64_t lo = int64_t(std::numeric_limits<T>::min());
      constexpr int64_t hi = int64_t(std::numeric_limits<T>::max());
      if (value.is_integral()) {
        DT_CHECK_ARG(value.as_int64() >= lo && value.as_int64() <= hi, "fill: value ", value.as_int64(),
                     " is out of range for ", dtype_name(dtype), " [", lo, ", ", hi, "]");
      } else {
        double v = value.as_double();
        // Truncation toward zero must land in range; 2^63 itself is out of range for i64.
        bool ok = std::isfinite(v) && std::trunc(v) >= double(lo) && std::trunc(v) <= double(hi) &&
                  std::trunc(v) < 9223372036854775808.0;
        DT_CHECK_ARG(ok, "fill: value ", v, " cannot be represented in ", dtype_name(dtype), " [", lo, ", ", hi, "]");
      }
    }
  });
}

uint64_t scalar_bits(Scalar value, DType dtype) {
  uint64_t bits = 0;
  dispatch_dtype(dtype, [&]<typename T>() {
    T v = value.to<T>();
    std::memcpy(&bits, &v, sizeof(T));  // little-endian: the value sits in the low bytes
  });
  return bits;
}

void fill(const StridedView& dst, Scalar value, Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  check_writable_view(dst, "fill: dst");
  check_fill_value(value, dst.dtype);
  if (dst.numel() == 0) return;
  uint64_t bits = scalar_bits(value, dst.dtype);
  if (device.is_cpu()) return cpu::fill(dst, bits);
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device);  // the buffers' device, not the thread's current one
  return cuda::fill(dst, bits, stream);
#else
  (void)stream;
  DT_THROW(Unsupported, "fill on ", device, ": dtensor was built without CUDA");
#endif
}

void fill(void* dst, int64_t count, DType dtype, Scalar value, Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  DT_CHECK_ARG(count >= 0, "fill: count must be non-negative, got ", count);
  fill(flat_view(dst, count, dtype), value, device, stream);
}

void fill(const Tensor& dst, Scalar value, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(dst), stream);
  DT_CHECK_ARG(dst.defined(), "fill: undefined tensor");
  fill(view_of(dst), value, dst.device(), stream);
}

}  // namespace dt::kernels
