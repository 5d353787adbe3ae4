// Device buffers on the UCX communicator (no NCCL): staged through pinned host memory. Run under dtrun; every rank
// shares the one GPU. Exits 77 (skipped) without a usable GPU (tests/gpu_test_main.cc).
#include <gtest/gtest.h>

#include <memory>

#include "collectives/process_group.h"
#include "core/tensor.h"
#include "tests/gpu_test_main.h"

namespace dt {
namespace {

std::shared_ptr<Communicator> world() {
  return test::shared_until_tests_end([] { return init_process_group(); });
}

TEST(UcxCudaStaging, CollectivesOnDeviceTensors) {
  auto c = world();
  const int n = c->size(), r = c->rank();
  const Device gpu = Device::cuda(0);
  ASSERT_TRUE(c->supports(gpu));

  Tensor t = Tensor::full({1000}, double(r + 1), DType::f32).to(gpu);
  c->all_reduce(t, ReduceOp::kSum)->wait();
  EXPECT_EQ(t.to(Device::cpu()).data<float>()[999], float(n * (n + 1) / 2));

  Tensor in = Tensor::full({3}, double(r), DType::i64).to(gpu);
  Tensor out = Tensor::zeros({3 * n}, DType::i64, gpu);
  c->all_gather(in, out)->wait();
  Tensor host = out.to(Device::cpu());
  for (int q = 0; q < n; ++q) EXPECT_EQ(host.data<int64_t>()[3 * q + 2], q);

  // In place: the input already sits in this rank's slot of the output.
  Tensor whole = Tensor::full({4 * n}, -1.0, DType::f32).to(gpu);
  Tensor mine = whole.narrow(0, 4 * r, 4);
  mine.copy_(Tensor::full({4}, double(10 + r), DType::f32).to(gpu));
  c->all_gather(mine.data_ptr(), whole.data_ptr(), 4, DType::f32, gpu)->wait();
  Tensor wh = whole.to(Device::cpu());
  for (int q = 0; q < n; ++q) EXPECT_EQ(wh.data<float>()[4 * q], float(10 + q));

  Tensor b = Tensor::full({5}, r == 0 ? 7.0 : 0.0, DType::bf16).to(gpu);
  c->broadcast(b, 0)->wait();
  EXPECT_EQ(float(b.to(Device::cpu()).data<BFloat16>()[4]), 7.0f);
  c->barrier()->wait();
}

}  // namespace
}  // namespace dt
