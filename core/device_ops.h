// The tensor engine: the data movement behind Tensor::copy_, contiguous, clone, to and fill_, for every device.
//
// Note [The tensor engine]
// core includes nothing of ours, yet its Tensor copies and fills must run the one strided engine of the kernels
// layer (kernels/layout.h with kernels::copy_cast and kernels::fill, CPU and CUDA), not a loop of their own. So
// kernels registers its entry points here (kernels/tensor_engine.cc) from a static initializer, and core calls
// them through tensor_engine(). A static library's object is linked only when something references it, and code
// that copies tensors through core references nothing in kernels; so kernels_dep (kernels/meson.build) passes
// `-Wl,--undefined=dt_kernels_tensor_engine` to every link that uses it, which pulls the registering object in
// whatever else the binary calls, and libdtensor.so takes every object anyway (link_whole). A binary that links
// core without kernels gets a clear error on its first copy or fill, never another, slower or different, path. The
// registration runs during static initialization: copies made by other static initializers are not supported.
#pragma once

#include "core/device.h"

namespace dt {

class Tensor;

struct TensorEngine {
  // dst = src: the same shape (src may be broadcast with zero strides), any dtypes, any devices, no overlap.
  // Work on a CUDA device is queued on `stream` (a stream of that device; between two GPUs, of the destination's);
  // a copy between devices synchronizes it before returning, since host memory or staging buffers take part.
  void (*copy)(const Tensor& dst, const Tensor& src, Stream stream) = nullptr;
  // Every element of dst (any strides) set to `value` converted to its dtype (kernels/fill.h); queued on `stream`.
  void (*fill)(const Tensor& dst, double value, Stream stream) = nullptr;
};

void register_tensor_engine(const TensorEngine& engine);
// The registered engine; throws dt::InternalError naming the missing kernels library when there is none.
const TensorEngine& tensor_engine();

}  // namespace dt
