#include "dtensor/device_mesh.h"

#include <map>
#include <mutex>
#include <sstream>

#include "collectives/exchange.h"
#include "collectives/process_group.h"
#include "core/error.h"
#include "core/logging.h"

namespace dt {

struct DeviceMesh::Impl {
  MeshShape shape{{1}};
  Device device;
  CommunicatorPtr world;
  CommunicatorPtr mesh_comm;           // null on non-members
  std::vector<CommunicatorPtr> comms;  // one per mesh dim (members only)
  std::vector<int64_t> coord;          // empty on non-members
  int64_t global_rank = -1;
  mutable std::mutex mu;
  mutable std::map<std::vector<std::string>, std::shared_ptr<Impl>> sub_meshes;
  // Set on sub-meshes: the mesh create() made (weak: it owns its sub-meshes) and its dims that this mesh spans.
  std::weak_ptr<Impl> root;
  std::vector<int64_t> root_dims;
};

namespace {
size_t mesh_hash(const MeshShape& shape, const Device& device) {
  size_t h = std::hash<MeshShape>()(shape);
  return h ^ (size_t(device.type) * 0x9e3779b97f4a7c15ull);
}
}  // namespace

// ---- creation ----

DeviceMesh DeviceMesh::create(Device device, std::vector<int64_t> sizes, std::vector<std::string> names,
                              std::vector<int64_t> ranks) {
  return create(default_world(), device, std::move(sizes), std::move(names), std::move(ranks));
}

Device mesh_device_for(const Communicator& world, DeviceType type) {
  if (type == DeviceType::kCPU) return Device::cpu();
  const Device home = world.home_device();
  if (home.type == DeviceType::kCUDA) return home;
  return default_cuda_device(world.rank());
}

DeviceMesh DeviceMesh::create(CommunicatorPtr world, DeviceType type, std::vector<int64_t> sizes,
                              std::vector<std::string> names, std::vector<int64_t> ranks) {
  DT_CHECK_ARG(world != nullptr, "DeviceMesh::create: the world communicator is null");
  const Device device = mesh_device_for(*world, type);
  // A non-NCCL world (UCX with staged device buffers) never made this rank's GPU current: the raw CUDA calls of the
  // host program (and of libraries that follow the current device) would all land on GPU 0.
  if (device.is_cuda() && world->home_device() != device) set_current_device(device);
  return create(std::move(world), device, std::move(sizes), std::move(names), std::move(ranks));
}

DeviceMesh DeviceMesh::create(DeviceType type, std::vector<int64_t> sizes, std::vector<std::string> names,
                              std::vector<int64_t> ranks) {
  return create(default_world(), type, std::move(sizes), std::move(names), std::move(ranks));
}

DeviceMesh DeviceMesh::create(CommunicatorPtr world, Device device, std::vector<int64_t> sizes,
                              std::vector<std::string> names, std::vector<int64_t> ranks) {
  DT_CHECK_ARG(world != nullptr, "DeviceMesh::create: the world communicator is null");
  const int64_t world_size = world->size();
  const bool default_ranks = ranks.empty();
  auto impl = std::make_shared<Impl>();
  impl->shape = MeshShape(sizes, names, ranks);
  impl->device = device;
  impl->world = world;
  impl->global_rank = world->rank();
  const MeshShape& shape = impl->shape;
  if (default_ranks) {
    DT_CHECK_ARG(shape.numel() == world_size, "mesh ", shape.to_string(), " needs ", shape.numel(),
                 " ranks but the world has ", world_size, " (give the mesh's ranks to use a subset)");
  } else {
    for (int64_t r : shape.ranks())
      DT_CHECK_ARG(r < world_size, "mesh ", shape.to_string(), " lists rank ", r, " but the world has only ",
                   world_size, " ranks");
  }
  DT_CHECK_ARG(world->supports(device), "mesh on ", device, ": the world communicator (", world->backend_name(),
               ") cannot move data on that device");

  // Every rank must build the same mesh: exchange a hash once, before any split could hang on a mismatch.
  if (world_size > 1) {
    const std::vector<int64_t> h = all_gather_ints(*world, {int64_t(mesh_hash(shape, device))});
    std::vector<int64_t> differ;
    for (int64_t r = 0; r < world_size; ++r)
      if (h[r] != h[world->rank()]) differ.push_back(r);
    if (!differ.empty()) {
      std::ostringstream os;
      for (size_t i = 0; i < differ.size(); ++i) os << (i ? ", " : "") << differ[i];
      DT_THROW(InvalidArgument, "DeviceMesh::create: rank ", world->rank(), " built mesh ", shape.to_string(), " on ",
               device, " but rank(s) ", os.str(),
               " built a different mesh (sizes, names, ranks or device differ); "
               "every rank must create the same mesh");
    }
  }

  bool member = shape.contains(impl->global_rank);
  bool whole_world = default_ranks;
  if (whole_world) {
    impl->mesh_comm = world;
  } else {
    int64_t key = member ? shape.linear_index(shape.coordinate_of(impl->global_rank)) : 0;
    impl->mesh_comm = world->split(member ? 0 : -1, int(key));
  }
  if (member) {
    impl->coord = shape.coordinate_of(impl->global_rank);
    for (int64_t m = 0; m < shape.ndim(); ++m) {
      if (shape.ndim() == 1) {
        impl->comms.push_back(impl->mesh_comm);
        continue;
      }
      std::vector<int64_t> base = impl->coord;
      base[size_t(m)] = 0;
      impl->comms.push_back(impl->mesh_comm->split(int(shape.linear_index(base)), int(impl->coord[size_t(m)])));
    }
  }
  DT_LOG_DEBUG("created ", shape.to_string(), " on ", device, member ? "" : " (not a member)");
  return DeviceMesh(std::move(impl));
}

// ---- accessors ----

const DeviceMesh::Impl& DeviceMesh::impl() const {
  DT_CHECK_ARG(impl_ != nullptr, "use of an undefined DeviceMesh");
  return *impl_;
}

const MeshShape& DeviceMesh::shape() const { return impl().shape; }
Device DeviceMesh::device() const { return impl().device; }
int64_t DeviceMesh::global_rank() const { return impl().global_rank; }
bool DeviceMesh::is_member() const { return !impl().coord.empty(); }
const CommunicatorPtr& DeviceMesh::world() const { return impl().world; }

const std::vector<int64_t>& DeviceMesh::coordinate() const {
  DT_CHECK_ARG(is_member(), "rank ", global_rank(), " is not part of ", to_string(), " and has no coordinate");
  return impl().coord;
}

int64_t DeviceMesh::local_rank(int64_t mesh_dim) const {
  const std::vector<int64_t>& c = coordinate();
  DT_CHECK_ARG(mesh_dim >= 0 && mesh_dim < int64_t(c.size()), "mesh dim ", mesh_dim, " is out of range for ",
               to_string());
  return c[size_t(mesh_dim)];
}

const CommunicatorPtr& DeviceMesh::comm(int64_t mesh_dim) const {
  DT_CHECK_ARG(is_member(), "rank ", global_rank(), " is not part of ", to_string(), " and has no communicator");
  DT_CHECK_ARG(mesh_dim >= 0 && mesh_dim < ndim(), "mesh dim ", mesh_dim, " is out of range for ", to_string());
  return impl().comms[size_t(mesh_dim)];
}

const CommunicatorPtr& DeviceMesh::mesh_comm() const {
  DT_CHECK_ARG(is_member(), "rank ", global_rank(), " is not part of ", to_string(), " and has no communicator");
  return impl().mesh_comm;
}

// ---- sub-meshes ----

DeviceMesh DeviceMesh::sub_mesh(const std::vector<std::string>& names) const {
  const Impl& p = impl();
  DT_CHECK_ARG(is_member(), "rank ", global_rank(), " is not part of ", to_string(), ": no sub-mesh through it");
  std::vector<int64_t> dims;
  for (const std::string& n : names) dims.push_back(p.shape.dim_index(n));
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.sub_meshes.find(names);
  if (it != p.sub_meshes.end()) return DeviceMesh(it->second);
  auto sub = std::make_shared<Impl>();
  sub->shape = p.shape.sub_mesh(dims, p.coord);
  sub->device = p.device;
  sub->world = p.world;
  sub->global_rank = p.global_rank;
  sub->coord = sub->shape.coordinate_of(p.global_rank);
  for (int64_t m : dims) sub->comms.push_back(p.comms[size_t(m)]);
  const bool has_root = !p.root_dims.empty();
  sub->root = has_root ? p.root : std::weak_ptr<Impl>(impl_);
  for (int64_t m : dims) sub->root_dims.push_back(has_root ? p.root_dims[size_t(m)] : m);
  if (dims.size() == 1) {
    sub->mesh_comm = sub->comms[0];
  } else if (dims.size() == size_t(p.shape.ndim()) && sub->shape.ranks() == p.shape.ranks()) {
    sub->mesh_comm = p.mesh_comm;
  } else {
    // The ranks that agree with us on the dims outside `names` form the sub-mesh.
    std::vector<int64_t> base = p.coord;
    for (int64_t m : dims) base[size_t(m)] = 0;
    sub->mesh_comm = p.mesh_comm->split(int(p.shape.linear_index(base)), int(sub->shape.linear_index(sub->coord)));
  }
  p.sub_meshes.emplace(names, sub);
  return DeviceMesh(sub);
}

DeviceMesh DeviceMesh::flatten(const std::string& name) const {
  std::vector<std::string> names = shape().names();
  if (names.empty() || ndim() == 1) {
    auto flat = std::make_shared<Impl>();
    const Impl& p = impl();
    flat->shape = p.shape.flatten(0, p.shape.ndim() - 1, p.shape.has_names() ? name : "");
    flat->device = p.device;
    flat->world = p.world;
    flat->global_rank = p.global_rank;
    flat->mesh_comm = p.mesh_comm;
    if (is_member()) {
      flat->coord = flat->shape.coordinate_of(p.global_rank);
      flat->comms = {p.mesh_comm};
    }
    return DeviceMesh(flat);
  }
  return flatten(names, name);
}

DeviceMesh DeviceMesh::flatten(const std::vector<std::string>& names, const std::string& name) const {
  const Impl& p = impl();
  auto flat = std::make_shared<Impl>();
  flat->shape = p.shape.flatten(names, name);
  flat->device = p.device;
  flat->world = p.world;
  flat->global_rank = p.global_rank;
  flat->mesh_comm = p.mesh_comm;
  if (is_member()) {
    int64_t first = p.shape.dim_index(names.front()), last = p.shape.dim_index(names.back());
    DeviceMesh merged = sub_mesh(names);
    flat->coord = flat->shape.coordinate_of(p.global_rank);
    for (int64_t m = 0; m < p.shape.ndim(); ++m) {
      if (m == first) flat->comms.push_back(merged.mesh_comm());
      if (m < first || m > last) flat->comms.push_back(p.comms[size_t(m)]);
    }
  }
  return DeviceMesh(flat);
}

DeviceMesh DeviceMesh::root() const {
  const Impl& p = impl();
  if (p.root_dims.empty()) return *this;
  std::shared_ptr<Impl> r = p.root.lock();
  DT_CHECK_ARG(r != nullptr, to_string(), " was taken from a mesh that no longer exists");
  return DeviceMesh(r);
}

std::vector<int64_t> DeviceMesh::root_dims() const {
  const Impl& p = impl();
  if (!p.root_dims.empty()) return p.root_dims;
  std::vector<int64_t> all(size_t(p.shape.ndim()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
  return all;
}

bool DeviceMesh::same_layout(const DeviceMesh& other) const {
  return shape().sizes() == other.shape().sizes() && shape().ranks() == other.shape().ranks() &&
         device() == other.device();
}

std::string DeviceMesh::to_string() const {
  if (!impl_) return "DeviceMesh(undefined)";
  return "DeviceMesh(" + impl_->shape.to_string() + " on " + impl_->device.to_string() + ")";
}

std::ostream& operator<<(std::ostream& os, const DeviceMesh& mesh) { return os << mesh.to_string(); }

}  // namespace dt
