// The objects behind the C API's opaque handles, and the registry that maps handles to them.
//
// Note [C API handles]
// A handle is a 64-bit id, never a pointer to the object and never reused: ids count up from a per-process random
// base, so a destroyed handle (or a stale one from an earlier object) is simply not in the registry, and a handle of
// one kind passed where another is expected is refused by its recorded kind. Lookups copy out a shared_ptr under the
// registry's mutex, so a concurrent destroy never frees an object another thread is using; destroy only removes the
// id. Objects keep what they depend on alive (a tensor its mesh, a mesh its world), so handles may be destroyed in
// any order.
#pragma once

#include <dtensor/c_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>

#include "collectives/communicator.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/comm_debug.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "fsdp/param_group.h"

namespace dt::capi {

enum class Kind : uint8_t { kComm, kMesh, kTensor, kWork, kFsdpGroup, kCommDebug };
const char* kind_name(Kind kind);

// What every object records: the thread that may communicate on its world.
struct Owned {
  std::thread::id owner;
};

struct CommObject : Owned {
  static constexpr Kind kKind = Kind::kComm;
  CommunicatorPtr comm;
  bool process_group = false;  // made by init_process_group: destroy_process_group when the last handle goes
  ~CommObject();
};

struct MeshObject : Owned {
  static constexpr Kind kKind = Kind::kMesh;
  DeviceMesh mesh;
  std::shared_ptr<CommObject> world;
};

struct TensorObject : Owned {
  static constexpr Kind kKind = Kind::kTensor;
  DTensor tensor;
  std::shared_ptr<MeshObject> mesh;  // keeps the world alive
};

struct WorkObject : Owned {
  static constexpr Kind kKind = Kind::kWork;
  std::variant<RedistributeHandle, checkpoint::SaveHandle> work;
  std::shared_ptr<MeshObject> mesh;  // a redistribution's result lives on it
  bool waited = false;
};

struct FsdpGroupObject : Owned {
  static constexpr Kind kKind = Kind::kFsdpGroup;
  std::unique_ptr<fsdp::ParamGroup> group;
  std::shared_ptr<MeshObject> mesh;
};

struct CommDebugObject : Owned {
  static constexpr Kind kKind = Kind::kCommDebug;
  std::unique_ptr<CommDebugMode> mode;
};

// The registry (one per process).
uint64_t register_object(Kind kind, std::shared_ptr<void> object);
// The object of `id` if it is alive and of `kind`; throws HandleError naming `what` otherwise.
std::shared_ptr<void> lookup_object(uint64_t id, Kind kind, const char* what);
// Removes id (HandleError when it is not a live handle of `kind`: a second destroy) and returns the object.
std::shared_ptr<void> remove_object(uint64_t id, Kind kind, const char* what);
size_t live_objects();  // for tests

// A bad handle: null, destroyed, or of another kind (DT_ERR_INVALID_HANDLE).
class HandleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename T, typename H>
std::shared_ptr<T> get(H handle, const char* what) {
  return std::static_pointer_cast<T>(lookup_object(uint64_t(reinterpret_cast<uintptr_t>(handle)), T::kKind, what));
}
template <typename H, typename T>
H make_handle(std::shared_ptr<T> object) {
  return reinterpret_cast<H>(uintptr_t(register_object(T::kKind, std::move(object))));
}
template <typename T, typename H>
std::shared_ptr<T> release(H handle, const char* what) {
  return std::static_pointer_cast<T>(remove_object(uint64_t(reinterpret_cast<uintptr_t>(handle)), T::kKind, what));
}

}  // namespace dt::capi
