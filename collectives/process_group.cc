#include "collectives/process_group.h"

#include <mutex>

#include "collectives/backend_registry.h"
#include "collectives/bootstrap.h"
#include "collectives/debug_communicator.h"
#include "collectives/trace_clock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/trace.h"

namespace dt {

namespace {

std::mutex g_mu;
// The job's store: rank 0 may host its server in-process, and backends (NCCL) bootstrap later communicators
// through it, so it lives until destroy_process_group().
std::shared_ptr<Store> g_store;

std::string registered_names() {
  std::string out;
  for (const std::string& n : backend_names()) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

CommunicatorPtr init_with(const Backend& backend, const BootstrapEnv& env) {
  set_process_rank(env.rank);
  config::log_settings();
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_store) g_store = connect_store(env);
  CommunicatorPtr world = maybe_wrap_debug(backend.factory(env, g_store));
  DT_ASSERT(world != nullptr, "backend ", backend.name, " returned no communicator");
  set_default_world(world);
  DT_LOG_INFO(backend.name, " world of ", env.world_size, " ranks");
  start_trace_from_env(*world);  // DT_TRACE: this rank's timeline, aligned to rank 0's clock
  return world;
}

}  // namespace

CommunicatorPtr init_process_group(DeviceType type) {
  register_builtin_backends();
  const Backend* backend = find_backend(type);
  if (backend == nullptr) {
    if (type == DeviceType::kCUDA)
      DT_THROW(Unsupported,
               "init_process_group(kCUDA): dtensor was built without CUDA/NCCL (-Dcuda=disabled or no "
               "NCCL found); use DeviceType::kCPU, whose UCX backend also stages CUDA tensors through host memory");
    DT_THROW(Unsupported, "init_process_group(kCPU): no host backend registered (registered: ", registered_names(),
             ")");
  }
  return init_with(*backend, init_from_env());
}

bool under_launcher() {
  for (const char* v : {"DT_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    if (config::lookup(v)) return true;
  return false;
}

CommunicatorPtr init_process_group_or_alone(DeviceType type) {
  if (under_launcher()) return init_process_group(type);
  register_builtin_backends();
  const Backend* backend = find_backend(type);
  DT_CHECK_ARG(backend != nullptr,
               "init_process_group_or_alone: no backend for this device type (registered: ", registered_names(), ")");
  // Rank 0 of 1: the launcher's variables as a lone process would have them, everything else from the environment.
  return init_with(*backend, init_from_env([](const std::string& name) -> std::optional<std::string> {
    if (name == "DT_RANK" || name == "DT_LOCAL_RANK") return "0";
    if (name == "DT_WORLD_SIZE" || name == "DT_LOCAL_WORLD_SIZE") return "1";
    return config::lookup(name);
  }));
}

CommunicatorPtr init_process_group(const std::string& name) {
  register_builtin_backends();
  const Backend* backend = find_backend(name);
  DT_CHECK_ARG(backend != nullptr, "init_process_group: no backend named '", name,
               "' (registered: ", registered_names(), ")");
  return init_with(*backend, init_from_env());
}

CommunicatorPtr init_process_group(const BootstrapEnv& env, const std::string& name) {
  register_builtin_backends();
  const Backend* backend = find_backend(name);
  DT_CHECK_ARG(backend != nullptr, "init_process_group: no backend named '", name,
               "' (registered: ", registered_names(), ")");
  return init_with(*backend, env);
}

void destroy_process_group() {
  trace::stop();  // DT_TRACE's rank file (no-op when not tracing)
  set_default_world(nullptr);
  std::shared_ptr<Store> store;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    store.swap(g_store);
  }
  store.reset();  // outside the lock: a hosted server joins its threads
}

Device cuda_device_for(int local_rank, int rank, const char* what) {
  const int visible = cuda_device_count();
  if (visible == 0)
    DT_THROW(Unsupported, what, " on rank ", rank,
             ": no usable CUDA device (no GPU, no driver, or dtensor built without CUDA); use DeviceType::kCPU");
  const Device device = Device::cuda(select_cuda_device(local_rank, rank, visible));
  check_device_usable(device);
  return device;
}

Device default_cuda_device(int rank) {
  int local_rank = -1;
  try {
    local_rank = init_from_env().local_rank;
  } catch (const InvalidArgument&) {
    // No launcher environment (ranks as threads, a hand-made world): the rank picks the device.
  }
  return cuda_device_for(local_rank, rank, "DeviceType::kCUDA");
}

int select_cuda_device(int local_rank, int rank, int visible_devices) {
  DT_CHECK_ARG(visible_devices >= 1, "select_cuda_device: expected at least one visible CUDA device, got ",
               visible_devices);
  DT_CHECK_ARG(rank >= 0, "select_cuda_device: expected a rank >= 0, got ", rank);
  return (local_rank >= 0 ? local_rank : rank) % visible_devices;
}

}  // namespace dt
