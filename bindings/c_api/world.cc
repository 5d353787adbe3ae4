// Communicators and meshes.
#include "bindings/c_api/funnel.h"
#include "collectives/bootstrap.h"
#include "collectives/process_group.h"
#include "collectives/thread/thread_comm.h"
#include "core/config.h"
#include "core/error.h"

using namespace dt;        // NOLINT: entry points are thin
using namespace dt::capi;  // NOLINT

namespace {

constexpr int64_t kMaxMeshDims = 16;

dt_comm_t wrap_world(CommunicatorPtr comm, bool process_group) {
  auto o = std::make_shared<CommObject>();
  o->owner = std::this_thread::get_id();
  o->comm = std::move(comm);
  o->process_group = process_group;
  return make_handle<dt_comm_t>(std::move(o));
}

std::vector<std::string> names_of(const char* const* names, int32_t n, const char* what) {
  require_array(names, n, kMaxMeshDims, what);
  std::vector<std::string> out;
  for (int32_t i = 0; i < n; ++i) {
    DT_CHECK_ARG(names[i] != nullptr, what, "[", i, "] is NULL");
    out.emplace_back(names[i]);
  }
  return out;
}

dt_mesh_t wrap_mesh(DeviceMesh mesh, std::shared_ptr<CommObject> world, std::thread::id owner) {
  auto o = std::make_shared<MeshObject>();
  o->owner = owner;
  o->mesh = std::move(mesh);
  o->world = std::move(world);
  return make_handle<dt_mesh_t>(std::move(o));
}

}  // namespace

extern "C" {

void dt_init_params_init(dt_init_params_t* p) {
  if (p == nullptr) return;
  *p = dt_init_params_t{};
  p->struct_size = sizeof(dt_init_params_t);
  p->world_size = 1;
  p->local_rank = -1;
}

dt_status_t dt_init_from_env(const char* backend, dt_comm_t* out) {
  return call("dt_init_from_env", [&] {
    require(out, "out");
    bool launched = false;
    for (const char* v : {"DT_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
      launched |= config::lookup(v).has_value();
    if (!launched) {  // a world of this one process
      CommunicatorPtr w = make_thread_world(1)[0];
      set_default_world(w);
      *out = wrap_world(std::move(w), false);
      return;
    }
    CommunicatorPtr w = init_process_group(std::string(backend != nullptr ? backend : "ucx"));
    *out = wrap_world(std::move(w), true);
  });
}

dt_status_t dt_init(const dt_init_params_t* p, dt_comm_t* out) {
  return call("dt_init", [&] {
    require(p, "params");
    require(out, "out");
    const dt_init_params_t q = read_params(p, &dt_init_params_init, "params", "dt_init_params_init");
    DT_CHECK_ARG(q.world_size >= 1 && q.rank >= 0 && q.rank < q.world_size, "params: rank ", q.rank, " of world_size ",
                 q.world_size, " (need 0 <= rank < world_size)");
    DT_CHECK_ARG(q.store_port >= 0 && q.store_port < 65536, "params.store_port ", q.store_port, " is not a port");
    DT_CHECK_ARG(q.secret != nullptr || q.insecure != 0 || q.world_size == 1,
                 "params.secret is NULL: give the store's shared secret, or set insecure = 1");
    if (q.world_size == 1 && q.store_host == nullptr) {
      CommunicatorPtr w = make_thread_world(1)[0];
      set_default_world(w);
      *out = wrap_world(std::move(w), false);
      return;
    }
    BootstrapEnv env;
    env.rank = q.rank;
    env.world_size = q.world_size;
    env.local_rank = q.local_rank;
    env.master_addr = q.store_host != nullptr ? q.store_host : "127.0.0.1";
    env.master_port = q.store_port != 0 ? q.store_port : kDefaultMasterPort;
    env.insecure_secret = q.secret == nullptr;
    env.secret = q.secret != nullptr ? q.secret : kInsecureDefaultSecret;
    env.store_hosted = q.store_hosted != 0;
    env.bind_addr = env.master_addr;
    env.launcher = "c api";
    CommunicatorPtr w = init_process_group(env, std::string(q.backend != nullptr ? q.backend : "ucx"));
    *out = wrap_world(std::move(w), true);
  });
}

dt_status_t dt_comm_rank(dt_comm_t comm, int32_t* rank) {
  return call("dt_comm_rank", [&] {
    auto o = get<CommObject>(comm, "comm");
    require(rank, "rank");
    *rank = o->comm->rank();
  });
}

dt_status_t dt_comm_size(dt_comm_t comm, int32_t* size) {
  return call("dt_comm_size", [&] {
    auto o = get<CommObject>(comm, "comm");
    require(size, "size");
    *size = o->comm->size();
  });
}

dt_status_t dt_comm_barrier(dt_comm_t comm) {
  return call("dt_comm_barrier", [&] {
    auto o = get<CommObject>(comm, "comm");
    require_owner(*o, "dt_comm_barrier");
    o->comm->barrier()->wait();
  });
}

dt_status_t dt_comm_destroy(dt_comm_t comm) {
  return call("dt_comm_destroy", [&] { release<CommObject>(comm, "comm"); });
}

dt_device_t dt_cpu(void) { return dt_device_t{DT_DEVICE_CPU, 0}; }
dt_device_t dt_cuda(int32_t index) { return dt_device_t{DT_DEVICE_CUDA, index}; }

dt_status_t dt_mesh_create(dt_comm_t world, dt_device_t device, const int64_t* sizes, int32_t ndim,
                           const char* const* names, dt_mesh_t* out) {
  return call("dt_mesh_create", [&] {
    auto w = get<CommObject>(world, "world");
    require_owner(*w, "dt_mesh_create");
    require_array(sizes, ndim, kMaxMeshDims, "sizes");
    require(out, "out");
    const std::vector<std::string> n = names == nullptr ? std::vector<std::string>{} : names_of(names, ndim, "names");
    DeviceMesh mesh = DeviceMesh::create(w->comm, to_device(device), std::vector<int64_t>(sizes, sizes + ndim), n);
    *out = wrap_mesh(std::move(mesh), w, w->owner);
  });
}

dt_status_t dt_mesh_sub(dt_mesh_t mesh, const char* const* names, int32_t n, dt_mesh_t* out) {
  return call("dt_mesh_sub", [&] {
    auto m = get<MeshObject>(mesh, "mesh");
    require(out, "out");
    DeviceMesh sub = m->mesh.sub_mesh(names_of(names, n, "names"));
    *out = wrap_mesh(std::move(sub), m->world, m->owner);
  });
}

dt_status_t dt_mesh_flatten(dt_mesh_t mesh, const char* const* names, int32_t n, const char* new_name, dt_mesh_t* out) {
  return call("dt_mesh_flatten", [&] {
    auto m = get<MeshObject>(mesh, "mesh");
    require_owner(*m, "dt_mesh_flatten");
    require(out, "out");
    DeviceMesh flat = m->mesh.flatten(names_of(names, n, "names"), new_name != nullptr ? new_name : "");
    *out = wrap_mesh(std::move(flat), m->world, m->owner);
  });
}

dt_status_t dt_mesh_ndim(dt_mesh_t mesh, int32_t* ndim) {
  return call("dt_mesh_ndim", [&] {
    auto m = get<MeshObject>(mesh, "mesh");
    require(ndim, "ndim");
    *ndim = int32_t(m->mesh.ndim());
  });
}

dt_status_t dt_mesh_shape(dt_mesh_t mesh, int64_t* sizes, int32_t cap) {
  return call("dt_mesh_shape", [&] {
    auto m = get<MeshObject>(mesh, "mesh");
    copy_ints(m->mesh.shape().sizes(), sizes, cap, "sizes");
  });
}

dt_status_t dt_mesh_coordinate(dt_mesh_t mesh, int64_t* coord, int32_t cap) {
  return call("dt_mesh_coordinate", [&] {
    auto m = get<MeshObject>(mesh, "mesh");
    copy_ints(m->mesh.is_member() ? m->mesh.coordinate() : std::vector<int64_t>(size_t(m->mesh.ndim()), -1), coord, cap,
              "coord");
  });
}

dt_status_t dt_mesh_destroy(dt_mesh_t mesh) {
  return call("dt_mesh_destroy", [&] { release<MeshObject>(mesh, "mesh"); });
}

}  // extern "C"
