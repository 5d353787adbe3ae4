// Backend registry: the communicator backends a process group can be made of, by name and device type. A backend
// registers a factory that builds the world communicator of a launch from the bootstrap environment and the job's
// store; init_process_group (collectives/process_group.h) picks one and knows no backend itself.
//
// The built-in backends (ucx, and nccl in a CUDA build with NCCL) are registered by register_builtin_backends(),
// which init_process_group calls: an explicit call rather than self-registering static objects, which the linker
// drops from static libraries when nothing references them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/bootstrap.h"
#include "collectives/communicator.h"
#include "core/device.h"

namespace dt {

class Store;

// Builds the world communicator of this process (rank env.rank of env.world_size). `store` is the job's connected
// store; the process group keeps it alive until destroy_process_group(), and the backend may keep it too.
using BackendFactory = std::function<CommunicatorPtr(const BootstrapEnv& env, std::shared_ptr<Store> store)>;

struct Backend {
  std::string name;        // "ucx", "nccl"
  DeviceType device_type;  // the memory its collectives move; init_process_group(type) takes the first registered
  BackendFactory factory;
};

// Adds a backend. Throws dt::InvalidArgument when the name is empty, already registered or the factory is empty.
void register_backend(Backend backend);
// The backend of that name, or nullptr.
const Backend* find_backend(const std::string& name);
// The first backend registered for `type`, or nullptr.
const Backend* find_backend(DeviceType type);
// The registered names, in registration order.
std::vector<std::string> backend_names();

// Registers the backends built into this library (once; later calls do nothing).
void register_builtin_backends();

namespace detail {
// Defined by each built-in backend in its own folder (collectives/ucx/ucx_backend.cc, collectives/nccl/nccl_backend.cc)
// and called by register_builtin_backends(): a referenced symbol keeps the backend linked in.
void register_ucx_backend();
#if defined(DT_WITH_NCCL)
void register_nccl_backend();
#endif
}  // namespace detail

}  // namespace dt
