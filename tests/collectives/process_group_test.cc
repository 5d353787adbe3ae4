// init_process_group by device type, run as one process under dtrun: CPU gives the UCX world and makes it the
// default; CUDA is refused with a clear error when this build or process has no CUDA/NCCL (the GPU script runs the
// NCCL path on a machine with a GPU).
#include <gtest/gtest.h>

#include "collectives/process_group.h"

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
}

}  // namespace
}  // namespace dt
