// Tensor copies, casts and fills on a CUDA device against the same operations on the CPU (skipped, exit 77, without a
// GPU). Linked with the kernels layer, whose engine (Note [The tensor engine] in core/device_ops.h) does the work.
#include <gtest/gtest.h>

#include "core/device_ops.h"
#include "core/tensor.h"
#include "kernels/copy.h"

namespace dt {
namespace {

TEST(CudaTensor, EngineIsRegistered) {
  EXPECT_NE(tensor_engine().copy, nullptr);
  EXPECT_NE(tensor_engine().fill, nullptr);
}

TEST(CudaTensor, StridedCopiesAndCastsMatchTheCpu) {
  const Device gpu = Device::cuda(0);
  Tensor a = Tensor::randn({7, 33, 5}, 3);
  Tensor ga = a.to(gpu);
  EXPECT_TRUE(equal(ga.to(Device::cpu()), a));
  // Strided views on the device: transpose, narrow, expand; then a cast.
  Tensor view = a.transpose(0, 2).narrow(1, 3, 20);
  Tensor gview = ga.transpose(0, 2).narrow(1, 3, 20);
  EXPECT_TRUE(equal(gview.contiguous().to(Device::cpu()), view.contiguous()));
  EXPECT_TRUE(equal(gview.to(DType::bf16).to(Device::cpu()), view.to(DType::bf16)));
  Tensor dst = Tensor::zeros({5, 33, 7}, DType::f64, gpu);
  dst.narrow(1, 0, 20).copy_(gview);
  Tensor ref = Tensor::zeros({5, 33, 7}, DType::f64);
  ref.narrow(1, 0, 20).copy_(view);
  EXPECT_TRUE(equal(dst.to(Device::cpu()), ref));
  Tensor row = Tensor::arange(5, DType::f32).to(gpu);
  Tensor b = Tensor::empty({3, 5}, DType::f32, gpu);
  b.copy_(row);  // broadcast
  EXPECT_TRUE(equal(b.to(Device::cpu()), Tensor::arange(5, DType::f32).expand({3, 5}).contiguous()));
}

TEST(CudaTensor, FillsMatchTheCpu) {
  const Device gpu = Device::cuda(0);
  for (DType t : {DType::f32, DType::bf16, DType::i64, DType::b8}) {
    Tensor g = Tensor::zeros({6, 4}, t, gpu), c = Tensor::zeros({6, 4}, t);
    g.narrow(1, 1, 2).fill_(3);
    c.narrow(1, 1, 2).fill_(3);
    EXPECT_TRUE(equal(g.to(Device::cpu()), c)) << dtype_name(t);
  }
}

}  // namespace
}  // namespace dt
