// The tensor engine of core's Tensor::copy_ / contiguous / clone / to / fill_ (Note [The tensor engine] in
// core/device_ops.h): kernels::copy_cast and kernels::fill on every device, plus the moves between devices.

#include "core/device.h"
#include "core/device_ops.h"
#include "core/error.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "kernels/copy.h"
#include "kernels/fill.h"

#if defined(DT_WITH_CUDA)
#include "core/cuda_check.h"
#endif

namespace dt::kernels {
namespace {

// dst = src on one device (CUDA work queued on `stream`).
void same_device_copy(const Tensor& dst, const Tensor& src, Stream stream) {
  DeviceGuard guard(dst.device());
  copy_cast(view_of(dst), view_of(src), dst.device(), stream);
}

// Note [Copies between devices]
// The bytes cross once, as one contiguous buffer in the destination's dtype (cudaMemcpyAsync, or
// cudaMemcpyPeerAsync between two GPUs). Strides, broadcasting and the cast are handled by the engine on either
// side: the source side packs and converts into a contiguous buffer unless the source already is one in the
// destination's dtype, and the destination side scatters from a contiguous landing buffer unless the destination
// is contiguous itself. So a strided or casting copy never moves more than numel elements across, and never
// stages a whole storage span through the host. The stream is synchronized before returning: host memory and the
// staging buffers must be settled when Tensor::copy_ returns.
void cross_device_copy(const Tensor& dst, const Tensor& src, Stream stream) {
#if defined(DT_WITH_CUDA)
  const Device dd = dst.device(), sd = src.device();
  // Between two GPUs `stream` belongs to the destination; the source side packs on its current stream.
  const Device gpu = dd.is_cuda() ? dd : sd;  // the device `stream` belongs to
  const Stream src_stream = sd.is_cuda() && dd.is_cuda() ? current_stream(sd) : resolve_stream(stream, gpu);
  Tensor packed = src;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
    packed = Tensor::empty(dst.shape(), dst.dtype(), sd);
    same_device_copy(packed, src, src_stream);
  }
  Tensor landing = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dst.dtype(), dd);
  const size_t nbytes = dst.nbytes();
  const auto cs = static_cast<cudaStream_t>(resolve_stream(stream, gpu).handle);
  if (sd.is_cuda() && dd.is_cuda()) {
    {
      DeviceGuard guard(sd);
      DT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(src_stream.handle)),
                    "Tensor::copy_ (packing on the source GPU)");
    }
    DeviceGuard guard(dd);
    DT_CUDA_CHECK(cudaMemcpyPeerAsync(landing.data_ptr(), dd.index, packed.data_ptr(), sd.index, nbytes, cs),
                  "Tensor::copy_");
  } else {
    DeviceGuard guard(gpu);
    DT_CUDA_CHECK(cudaMemcpyAsync(landing.data_ptr(), packed.data_ptr(), nbytes,
                                  sd.is_cuda() ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, cs),
                  "Tensor::copy_");
  }
  if (!landing.shares_storage_with(dst)) {
    if (dd.is_cpu()) {
      DeviceGuard guard(gpu);
      DT_CUDA_CHECK(cudaStreamSynchronize(cs), "Tensor::copy_ (download)");
    }
    same_device_copy(dst, landing, Stream{cs});
  }
  DeviceGuard guard(gpu);
  DT_CUDA_CHECK(cudaStreamSynchronize(cs), "Tensor::copy_");
#else
  (void)stream;
  DT_THROW(Unsupported, "copy_ between ", src.device(), " and ", dst.device(), ": dtensor was built without CUDA");
#endif
}

void engine_copy(const Tensor& dst, const Tensor& src, Stream stream) {
  if (dst.device() == src.device())
    same_device_copy(dst, src, stream);
  else
    cross_device_copy(dst, src, stream);
}

void engine_fill(const Tensor& dst, double value, Stream stream) {
  DeviceGuard guard(dst.device());
  fill(dst, Scalar(value), stream);
}

}  // namespace
}  // namespace dt::kernels

// The symbol kernels_dep names with -Wl,--undefined (Note [The tensor engine]): referencing it links this object,
// whose initializer registers the engine.
extern "C" {
extern const bool dt_kernels_tensor_engine;
const bool dt_kernels_tensor_engine = [] {
  dt::register_tensor_engine({&dt::kernels::engine_copy, &dt::kernels::engine_fill});
  return true;
}();
}
