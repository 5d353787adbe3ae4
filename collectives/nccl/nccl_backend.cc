// The NCCL backend's entry in the backend registry (collectives/backend_registry.h): the GPU world of a launch, one
// device per process (select_cuda_device), made the process's current device before NCCL initializes.
#include "collectives/backend_registry.h"
#include "collectives/nccl/nccl_comm.h"
#include "collectives/process_group.h"
#include "collectives/store/store.h"
#include "core/cuda_check.h"

namespace dt::detail {

void register_nccl_backend() {
  register_backend({"nccl", DeviceType::kCUDA, [](const BootstrapEnv& env, std::shared_ptr<Store> store) {
                      const Device device = cuda_device_for(env.local_rank, env.rank, "init_process_group(kCUDA)");
                      // The process's device for good, not for a scope: later runtime calls default to it.
                      DT_CUDA_CHECK(cudaSetDevice(device.index), "init_process_group(kCUDA) on rank ", env.rank);
                      return CommunicatorPtr(NcclCommunicator::create(*store, env.rank, env.world_size, device));
                    }});
}

}  // namespace dt::detail
