#include "kernels/cast.h"

#include "core/allocator.h"
#include "core/error.h"

namespace dt::kernels {

void check_cast_args(const void* dst, const void* src, int64_t count) {
  DT_CHECK_ARG(count >= 0, "cast: count must be non-negative, got ", count);
  DT_CHECK_ARG(count == 0 || (dst && src), "cast: null buffer for ", count, " elements");
}

void cast(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t count, Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  check_cast_args(dst, src, count);
  if (count == 0) return;
  if (device.is_cpu()) return cpu::cast(dst, dst_dtype, src, src_dtype, count);
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device);  // the buffers' device, not the thread's current one
  return cuda::cast(dst, dst_dtype, src, src_dtype, count, stream);
#else
  (void)stream;
  DT_THROW(Unsupported, "cast on ", device, ": dtensor was built without CUDA");
#endif
}

}  // namespace dt::kernels
