#include "kernels/reduce.h"

#include "core/allocator.h"
#include "core/error.h"

namespace dt::kernels {

void check_reduce_args(const void* out, const void* a, const void* b, int64_t count, DType dtype) {
  DT_CHECK_ARG(count >= 0, "reduce: count must be non-negative, got ", count);
  DT_CHECK_ARG(count == 0 || (out && a && b), "reduce: null buffer for ", count, " elements of ", dtype_name(dtype));
}

void reduce(void* out, const void* a, const void* b, int64_t count, DType dtype, ReduceOp op, Device device,
            Stream stream) {
  const StreamUseScope stream_use(device, stream);
  check_reduce_args(out, a, b, count, dtype);
  if (count == 0) return;
  if (device.is_cpu()) return cpu::reduce(out, a, b, count, dtype, op);
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device);  // the buffers' device, not the thread's current one
  return cuda::reduce(out, a, b, count, dtype, op, stream);
#else
  (void)stream;
  DT_THROW(Unsupported, "reduce on ", device, ": dtensor was built without CUDA");
#endif
}

void divide_by(void* x, int64_t count, DType dtype, int64_t divisor, Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  DT_CHECK_ARG(divisor != 0, "divide_by: divisor must be non-zero");
  DT_CHECK_ARG(count >= 0 && (count == 0 || x), "divide_by: bad buffer (", count, " elements)");
  if (count == 0 || divisor == 1) return;
  if (device.is_cpu()) return cpu::divide_by(x, count, dtype, divisor);
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device);  // the buffers' device, not the thread's current one
  return cuda::divide_by(x, count, dtype, divisor, stream);
#else
  (void)stream;
  DT_THROW(Unsupported, "divide_by on ", device, ": dtensor was built without CUDA");
#endif
}

}  // namespace dt::kernels
