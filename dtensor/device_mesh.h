// DeviceMesh: a MeshShape (an n-d grid of global ranks with named dims) plus the communicators that move data along
// it: one per mesh dim, created once (by split) and cached, and one spanning the whole mesh.
//
//   dt::init_process_group();                                    // or dt::set_default_world(comm)
//   auto mesh = dt::DeviceMesh::create(dt::Device::cpu(), {2, 2}, {"dp", "tp"});
//   mesh["tp"]                // the 1-d tp group through this rank (reuses the tp communicator)
//   mesh.flatten()            // the whole mesh as one dim
//
// Creation is collective over the world: every rank of the world calls it with the same arguments (ranks outside
// the mesh's rank list get a non-member mesh, on which they hold nothing). The mesh is checked to be identical on
// every rank (a hash exchange); a mismatch is an error naming the ranks that differ, instead of a later hang.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/device.h"
#include "placement/mesh_shape.h"

namespace dt {

class DeviceMesh {
 public:
  DeviceMesh() = default;

  // Collective over `world` (or the default world). `ranks`: the world ranks of the mesh in row-major order
  // (default: 0..n-1, which then must be the whole world).
  static DeviceMesh create(CommunicatorPtr world, Device device, std::vector<int64_t> sizes,
                           std::vector<std::string> names = {}, std::vector<int64_t> ranks = {});
  static DeviceMesh create(Device device, std::vector<int64_t> sizes, std::vector<std::string> names = {},
                           std::vector<int64_t> ranks = {});
  // By device type, as PyTorch's init_device_mesh("cuda", ...): kCPU is Device::cpu(); kCUDA is this rank's own GPU
  // (mesh_device_for), which also becomes the thread's current device (as init_device_mesh sets it). Throws
  // Unsupported on a rank that has no usable CUDA device.
  static DeviceMesh create(CommunicatorPtr world, DeviceType type, std::vector<int64_t> sizes,
                           std::vector<std::string> names = {}, std::vector<int64_t> ranks = {});
  static DeviceMesh create(DeviceType type, std::vector<int64_t> sizes, std::vector<std::string> names = {},
                           std::vector<int64_t> ranks = {});

  bool defined() const { return impl_ != nullptr; }
  const MeshShape& shape() const;
  int64_t ndim() const { return shape().ndim(); }
  int64_t size() const { return shape().numel(); }
  int64_t size(int64_t mesh_dim) const { return shape().size(mesh_dim); }
  Device device() const;
  // This process's (or thread's) rank in the world, and whether it is part of this mesh.
  int64_t global_rank() const;
  bool is_member() const;
  // This rank's coordinate (members only).
  const std::vector<int64_t>& coordinate() const;
  // This rank's index along a mesh dim (its rank in that dim's communicator).
  int64_t local_rank(int64_t mesh_dim) const;
  int64_t local_rank(const std::string& name) const { return local_rank(shape().dim_index(name)); }

  // The communicator along a mesh dim (members only), and the one spanning the mesh (group rank = linear index).
  const CommunicatorPtr& comm(int64_t mesh_dim) const;
  const CommunicatorPtr& comm(const std::string& name) const { return comm(shape().dim_index(name)); }
  const CommunicatorPtr& mesh_comm() const;
  // The world the mesh was created from (cross-mesh transfers use it with global ranks).
  const CommunicatorPtr& world() const;

  // Sub-meshes through this rank's coordinate, by dim names (in the order given). A 1-d sub-mesh reuses that dim's
  // communicator; a larger one is created (collectively over this mesh) once and cached.
  DeviceMesh operator[](const std::string& name) const { return sub_mesh({name}); }
  DeviceMesh operator[](const std::vector<std::string>& names) const { return sub_mesh(names); }
  // mesh[{"dp", "tp"}]: a list of names (without this overload the braces could also make one std::string).
  DeviceMesh operator[](std::initializer_list<std::string> names) const { return sub_mesh(names); }
  DeviceMesh sub_mesh(const std::vector<std::string>& names) const;
  // Merges all dims (or the named contiguous dims) into one.
  DeviceMesh flatten(const std::string& name = "") const;
  DeviceMesh flatten(const std::vector<std::string>& names, const std::string& name = "") const;
  DeviceMesh flatten(std::initializer_list<std::string> names, const std::string& name = "") const {
    return flatten(std::vector<std::string>(names), name);
  }

  // The mesh this one was taken from by sub_mesh() (through any number of sub_mesh() calls: the mesh create() or
  // flatten() made), and the dims of that mesh this one spans, in this mesh's order. A mesh not taken from another
  // is its own root. FSDP over mesh["dp"] of parameters on mesh["tp"] lays the shards out on their root.
  DeviceMesh root() const;
  std::vector<int64_t> root_dims() const;

  bool operator==(const DeviceMesh& other) const { return impl_ == other.impl_; }
  bool same_layout(const DeviceMesh& other) const;  // same shape, ranks and device
  std::string to_string() const;

  struct Impl;

 private:
  explicit DeviceMesh(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const;
  std::shared_ptr<Impl> impl_;
};

std::ostream& operator<<(std::ostream& os, const DeviceMesh& mesh);

// The device a mesh of `type` uses on this rank of `world`: the CPU, or for kCUDA the world's own GPU when its
// backend lives on one (NCCL: the GPU init_process_group chose), else cuda:<local rank modulo the visible devices>
// (the launcher's LOCAL_RANK; the world rank when unknown).
Device mesh_device_for(const Communicator& world, DeviceType type);

}  // namespace dt
