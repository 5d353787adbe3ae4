// Device-side tensor work that core cannot do itself: core includes nothing of ours, so the kernels layer registers
// these at start-up (kernels/copy.cc). Without them, CUDA copies that are not contiguous same-dtype stage through
// host memory and CUDA fills upload a host buffer: correct, only slower.
#pragma once

namespace dt {

class Tensor;

struct DeviceTensorOps {
  // dst and src on the same CUDA device, same shape (src may be broadcast with zero strides), any dtypes.
  void (*copy_cast)(const Tensor& dst, const Tensor& src) = nullptr;
  // Fills a CUDA tensor (any strides) with a value converted to its dtype.
  void (*fill)(const Tensor& dst, double value) = nullptr;
};

void register_device_tensor_ops(const DeviceTensorOps& ops);
const DeviceTensorOps& device_tensor_ops();

}  // namespace dt
