#include "collectives/process_group.h"

#include <mutex>

#include "collectives/bootstrap.h"
#include "collectives/debug_communicator.h"
#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"

#if defined(DT_WITH_NCCL)
#include "collectives/nccl/nccl_comm.h"
#endif

namespace dt {

std::shared_ptr<Communicator> init_process_group(DeviceType type) {
  if (type == DeviceType::kCPU) return init_process_group();
#if defined(DT_WITH_NCCL)
  BootstrapEnv env = init_from_env();
  set_process_rank(env.rank);
  config::log_settings();
  int devices = cuda_device_count();
  if (devices == 0) DT_THROW(Unsupported, "init_process_group(kCUDA) on rank ", env.rank, ": no usable CUDA device");
  Device device = Device::cuda(env.local_rank >= 0 ? env.local_rank : env.rank % devices);
  check_device_usable(device);
  // The store stays alive for the whole process: rank 0 may host its server, and later communicators may use it.
  static std::mutex mu;
  static std::shared_ptr<Store> store;
  std::lock_guard<std::mutex> lock(mu);
  if (!store) store = connect_store(env);
  std::shared_ptr<Communicator> world =
      maybe_wrap_debug(NcclCommunicator::create(*store, env.rank, env.world_size, device));
  set_default_world(world);
  DT_LOG_INFO("NCCL world of ", env.world_size, " ranks on ", device);
  return world;
#else
  DT_THROW(Unsupported, "init_process_group(kCUDA): dtensor was built without CUDA/NCCL (-Dcuda=disabled or no NCCL "
           "found); use DeviceType::kCPU, whose UCX backend also stages CUDA tensors through host memory");
#endif
}

}  // namespace dt
