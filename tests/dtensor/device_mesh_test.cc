// DeviceMesh::create by device type (PyTorch's init_device_mesh("cpu" | "cuda", ...)) on the thread backend.
#include "dtensor/device_mesh.h"

#include <gtest/gtest.h>

#include <string>

#include "collectives/thread/thread_comm.h"
#include "dtensor/dtensor.h"

namespace dt {
namespace {

TEST(DeviceMeshByType, CpuMeshIsTheCpuDevice) {
  run_threads(4, [](CommunicatorPtr world) {
    DeviceMesh mesh = DeviceMesh::create(world, DeviceType::kCPU, {2, 2}, {"dp", "tp"});
    EXPECT_EQ(mesh.device(), Device::cpu());
    EXPECT_TRUE(mesh.same_layout(DeviceMesh::create(world, Device::cpu(), {2, 2}, {"dp", "tp"})));
    const Tensor full = Tensor::arange(12).reshape({4, 3});
    DTensor x = distribute_tensor(full, mesh, {Shard{0}, Replicate{}}, {}, std::nullopt);
    EXPECT_TRUE(equal(x.full_tensor(), full));
  });
}

TEST(DeviceMeshByType, CudaMeshPicksThisRanksGpuOrSaysThereIsNone) {
  run_threads(2, [](CommunicatorPtr world) {
    const int visible = cuda_device_count();
    if (visible == 0) {
      try {
        DeviceMesh::create(world, DeviceType::kCUDA, {2});
        ADD_FAILURE() << "expected Unsupported without a CUDA device";
      } catch (const Unsupported& e) {
        EXPECT_NE(std::string(e.what()).find("no usable CUDA device"), std::string::npos) << e.what();
      }
      return;
    }
    // A host-backend world: cuda:<local rank (unknown here: the world rank) modulo the visible devices>.
    EXPECT_EQ(mesh_device_for(*world, DeviceType::kCUDA), Device::cuda(int(world->rank()) % visible));
  });
}

}  // namespace
}  // namespace dt

namespace dt {
namespace {

TEST(DeviceMeshRoot, SubMeshesKnowTheMeshTheyCameFrom) {
  run_threads(8, [](CommunicatorPtr world) {
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 2, 2}, {"rep", "shard", "tp"});
    EXPECT_EQ(mesh.root(), mesh);
    EXPECT_EQ(mesh.root_dims(), (std::vector<int64_t>{0, 1, 2}));
    DeviceMesh dp = mesh[{"shard", "rep"}];
    EXPECT_EQ(dp.root(), mesh);
    EXPECT_EQ(dp.root_dims(), (std::vector<int64_t>{1, 0}));
    // A sub-mesh of a sub-mesh maps through to the root's dims.
    EXPECT_EQ(dp["rep"].root(), mesh);
    EXPECT_EQ(dp["rep"].root_dims(), (std::vector<int64_t>{0}));
    EXPECT_EQ(mesh["tp"].root_dims(), (std::vector<int64_t>{2}));
    // flatten() makes a mesh of its own.
    DeviceMesh flat = mesh.flatten();
    EXPECT_EQ(flat.root(), flat);
  });
}

}  // namespace
}  // namespace dt
