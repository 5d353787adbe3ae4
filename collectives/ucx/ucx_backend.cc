// The UCX backend's entry in the backend registry (collectives/backend_registry.h): the host world of a launch.
#include "collectives/backend_registry.h"
#include "collectives/store/store.h"
#include "collectives/ucx/ucx_communicator.h"

namespace dt::detail {

void register_ucx_backend() {
  register_backend({"ucx", DeviceType::kCPU, [](const BootstrapEnv& env, std::shared_ptr<Store> store) {
                      return create_ucx_communicator(std::move(store), env.rank, env.world_size);
                    }});
}

}  // namespace dt::detail
