#include "kernels/copy.h"

#include <cstring>

#include "core/allocator.h"
#include "core/error.h"
#include "kernels/cpu/stream_copy.h"

namespace dt::kernels {

namespace {
void run_copy_cast(const StridedView& dst, const StridedView& src, Device device, Stream stream, const char* what) {
  if (dst.numel() == 0) return;
  if (device.is_cpu()) return cpu::copy_cast(dst, src);
#if defined(DT_WITH_CUDA)
  (void)what;
  DeviceGuard guard(device);  // the buffers' device, not the thread's current one
  return cuda::copy_cast(dst, src, stream);
#else
  (void)stream;
  DT_THROW(Unsupported, what, " on ", device, ": dtensor was built without CUDA");
#endif
}

Device common_device(const Tensor& dst, const Tensor& src, const char* what) {
  DT_CHECK_ARG(dst.defined() && src.defined(), what, ": undefined tensor");
  Device d = dst.device();
  DT_CHECK_ARG(src.device() == d, what, ": tensors must be on one device, got dst on ", d, " and src on ", src.device(),
               " (Tensor::copy_ moves data between devices)");
  return d;
}
}  // namespace

void check_copy_args(const StridedView& dst, const StridedView& src, bool same_dtype, const char* what) {
  check_writable_view(dst, what);
  check_view(src, what);
  bool same_shape = dst.ndim == src.ndim;
  for (int d = 0; same_shape && d < dst.ndim; ++d) same_shape = dst.shape[d] == src.shape[d];
  DT_CHECK_ARG(same_shape, what, ": shapes differ: dst ", view_str(dst), ", src ", view_str(src));
  DT_CHECK_ARG(!same_dtype || dst.dtype == src.dtype, what, ": dtypes differ: dst ", dtype_name(dst.dtype), ", src ",
               dtype_name(src.dtype), " (copy_cast converts)");
}

void pack(const StridedView& src, void* dst, Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  check_view(src, "pack: src");
  DT_CHECK_ARG(dst || src.numel() == 0, "pack: null destination for ", view_str(src));
  StridedView d = contiguous_view(dst, src.sizes(), src.dtype);
  run_copy_cast(d, src, device, stream, "pack");
}

void unpack(const void* src, const StridedView& dst, Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  check_writable_view(dst, "unpack: dst");
  DT_CHECK_ARG(src || dst.numel() == 0, "unpack: null source for ", view_str(dst));
  StridedView s = contiguous_view(src, dst.sizes(), dst.dtype);
  run_copy_cast(dst, s, device, stream, "unpack");
}

void copy(const StridedView& dst, const StridedView& src, Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  check_copy_args(dst, src, true, "copy");
  run_copy_cast(dst, src, device, stream, "copy");
}

void copy_cast(const StridedView& dst, const StridedView& src, Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  check_copy_args(dst, src, false, "copy_cast");
  run_copy_cast(dst, src, device, stream, "copy_cast");
}

size_t stream_copy_min_bytes() { return cpu::kStreamMinBytes; }
void stream_copy_bytes(void* dst, const void* src, size_t nbytes) { cpu::stream_copy(dst, src, nbytes); }
void stream_copy_fence() { cpu::stream_fence(); }

void copy_bytes(void* dst, const void* src, size_t nbytes, Device device, Stream stream) {
  DT_CHECK_ARG(nbytes == 0 || (dst && src), "copy_bytes: null pointer for ", nbytes, " bytes");
  if (nbytes == 0) return;
  if (device.is_cpu()) {
    cpu::large_copy(dst, src, nbytes);  // Note [Streaming copies]
    return;
  }
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device);  // the buffers' device, not the thread's current one
  return cuda::copy_bytes(dst, src, nbytes, stream);
#else
  (void)stream;
  DT_THROW(Unsupported, "copy_bytes on ", device, ": dtensor was built without CUDA");
#endif
}

void copy(const Tensor& dst, const Tensor& src, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(dst), stream);
  Device d = common_device(dst, src, "copy");
  copy(view_of(dst), view_of(src), d, stream);
}

void copy_cast(const Tensor& dst, const Tensor& src, Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(dst), stream);
  Device d = common_device(dst, src, "copy_cast");
  copy_cast(view_of(dst), view_of(src), d, stream);
}

}  // namespace dt::kernels
