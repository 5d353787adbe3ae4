#include "collectives/backend_registry.h"

#include <mutex>

#include "core/error.h"

namespace dt {

namespace {
std::mutex g_mu;

std::vector<std::shared_ptr<const Backend>>& backends() {
  static std::vector<std::shared_ptr<const Backend>> list;
  return list;
}
}  // namespace

void register_backend(Backend backend) {
  DT_CHECK_ARG(!backend.name.empty(), "register_backend: the backend name is empty");
  DT_CHECK_ARG(backend.factory != nullptr, "register_backend: backend '", backend.name, "' has no factory");
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& b : backends())
    DT_CHECK_ARG(b->name != backend.name, "register_backend: a backend named '", backend.name,
                 "' is already registered");
  backends().push_back(std::make_shared<const Backend>(std::move(backend)));
}

// Entries are never removed, so the pointers handed out stay valid.
const Backend* find_backend(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& b : backends())
    if (b->name == name) return b.get();
  return nullptr;
}

const Backend* find_backend(DeviceType type) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& b : backends())
    if (b->device_type == type) return b.get();
  return nullptr;
}

std::vector<std::string> backend_names() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<std::string> names;
  for (const auto& b : backends()) names.push_back(b->name);
  return names;
}

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    detail::register_ucx_backend();
#if defined(DT_WITH_NCCL)
    detail::register_nccl_backend();
#endif
  });
}

}  // namespace dt
