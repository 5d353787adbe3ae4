// Element type conversion of a contiguous buffer: dst[i] = convert(src[i]) for i < count, any dtype to any dtype
// (rules in kernels/convert.h: f16/bf16 through float with round-to-nearest-even). Same dtypes is a plain copy.
// Pointers live on `device`; CUDA work is queued on `stream`, CPU work runs synchronously. No overlap allowed.
// For strided tensors use copy_cast (kernels/copy.h).
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/dtype.h"

namespace dt::kernels {

void cast(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t count, Device device,
          Stream stream = {});

void check_cast_args(const void* dst, const void* src, int64_t count);

namespace cpu {
void cast(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t count);
}  // namespace cpu

namespace cuda {
void cast(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t count, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
