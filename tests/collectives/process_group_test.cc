// init_process_group by device type and by backend name, run as one process under dtrun: CPU gives the UCX world
// and makes it the default; CUDA is refused with a clear error when this build or process has no CUDA/NCCL (the GPU
// script runs the NCCL path on a machine with a GPU); destroy_process_group drops the default world. Also the device
// selection arithmetic (pure).
#include "collectives/process_group.h"

#include <gtest/gtest.h>

#include "collectives/backend_registry.h"
#include "core/tensor.h"

namespace dt {
namespace {

TEST(ProcessGroup, ByDeviceType) {
  if (!cuda_available()) {
    try {
      init_process_group(DeviceType::kCUDA);
      ADD_FAILURE() << "expected dt::Unsupported";
    } catch (const Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find("init_process_group(kCUDA)"), std::string::npos) << e.what();
    }
  }
  CommunicatorPtr world = init_process_group(DeviceType::kCPU);
  EXPECT_EQ(world->backend_name(), "ucx");
  EXPECT_EQ(default_world(), world);
  Tensor t = Tensor::full({4}, 2.0);
  world->all_reduce(t, ReduceOp::kSum)->wait();
  EXPECT_EQ(t.to_vector(), std::vector<double>(4, 2.0 * world->size()));
  destroy_process_group();
  EXPECT_THROW(default_world(), InvalidArgument);
  destroy_process_group();  // without a process group: nothing to do
}

TEST(ProcessGroup, ByBackendName) {
  CommunicatorPtr world = init_process_group("ucx");
  EXPECT_EQ(world->backend_name(), "ucx");
  EXPECT_EQ(default_world(), world);
  Tensor t = Tensor::full({3}, 1.5);
  world->all_reduce(t, ReduceOp::kSum)->wait();
  EXPECT_EQ(t.to_vector(), std::vector<double>(3, 1.5 * world->size()));
  world.reset();
  destroy_process_group();
  try {
    init_process_group("no_such_backend");
    ADD_FAILURE() << "expected dt::InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'no_such_backend'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ucx"), std::string::npos) << "the message lists the registered backends: " << msg;
  }
}

TEST(BackendRegistry, BuiltinsAndDuplicates) {
  register_builtin_backends();
  register_builtin_backends();  // idempotent
  const Backend* ucx = find_backend("ucx");
  ASSERT_NE(ucx, nullptr);
  EXPECT_EQ(ucx->device_type, DeviceType::kCPU);
  EXPECT_EQ(find_backend(DeviceType::kCPU), ucx);
#if defined(DT_WITH_NCCL)
  ASSERT_NE(find_backend("nccl"), nullptr);
  EXPECT_EQ(find_backend(DeviceType::kCUDA)->name, "nccl");
#endif
  EXPECT_EQ(find_backend("no_such_backend"), nullptr);
  auto factory = [](const BootstrapEnv&, std::shared_ptr<Store>) -> CommunicatorPtr { return nullptr; };
  EXPECT_THROW(register_backend({"ucx", DeviceType::kCPU, factory}), InvalidArgument);
  EXPECT_THROW(register_backend({"", DeviceType::kCPU, factory}), InvalidArgument);
  EXPECT_THROW(register_backend({"test_no_factory", DeviceType::kCPU, nullptr}), InvalidArgument);
  const std::vector<std::string> names = backend_names();
  EXPECT_EQ(names.front(), "ucx");
}

// Reference: the device of each rank written out by hand for the launch shapes that matter.
TEST(SelectCudaDevice, LaunchShapes) {
  // One GPU per process (per-rank CUDA_VISIBLE_DEVICES, Slurm --gpus-per-task=1): every rank sees one device, 0.
  for (int local_rank = 0; local_rank < 8; ++local_rank)
    EXPECT_EQ(select_cuda_device(local_rank, 8 + local_rank, 1), 0);
  // 8 ranks per node on 4 devices: two ranks per device, in local-rank order.
  const int expect_8_on_4[] = {0, 1, 2, 3, 0, 1, 2, 3};
  for (int l = 0; l < 8; ++l) EXPECT_EQ(select_cuda_device(l, 16 + l, 4), expect_8_on_4[l]) << "local rank " << l;
  // 4 ranks per node on 8 devices: one each, the first four.
  for (int l = 0; l < 4; ++l) EXPECT_EQ(select_cuda_device(l, l, 8), l);
  // No local rank from the launcher: the global rank modulo the devices.
  const int expect_by_rank[] = {0, 1, 2, 0, 1, 2, 0};
  for (int r = 0; r < 7; ++r) EXPECT_EQ(select_cuda_device(-1, r, 3), expect_by_rank[r]) << "rank " << r;
  // Second node of a 2 x 4 job with 4 devices: local ranks 0..3 take devices 0..3 (not rank % 4 by accident).
  for (int l = 0; l < 4; ++l) EXPECT_EQ(select_cuda_device(l, 4 + l, 4), l);
  EXPECT_THROW(select_cuda_device(0, 0, 0), InvalidArgument);
  EXPECT_THROW(select_cuda_device(-1, -1, 2), InvalidArgument);
}

}  // namespace
}  // namespace dt
