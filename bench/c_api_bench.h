// What the C API benchmarks share: the check of a call, and the world with a 1-d CPU mesh over it.
#pragma once

#include <dtensor/c_api.h>

#include <cstdio>
#include <cstdlib>

// A call that does not return DT_OK prints itself and dt_last_error() and exits 1.
#define DT_BENCH_CHECK(call)                                           \
  do {                                                                 \
    if ((call) != DT_OK) {                                             \
      std::fprintf(stderr, "%s failed: %s\n", #call, dt_last_error()); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

namespace dt::bench {

// The launcher's world (dt_init_from_env) and a 1-d CPU mesh of all its ranks.
struct CApiWorld {
  dt_comm_t world = nullptr;
  dt_mesh_t mesh = nullptr;
  int32_t rank = 0, size = 1;

  CApiWorld() {
    DT_BENCH_CHECK(dt_init_from_env(nullptr, &world));
    DT_BENCH_CHECK(dt_comm_rank(world, &rank));
    DT_BENCH_CHECK(dt_comm_size(world, &size));
    int64_t sizes[1] = {size};
    DT_BENCH_CHECK(dt_mesh_create(world, dt_cpu(), sizes, 1, nullptr, &mesh));
  }
  ~CApiWorld() {
    DT_BENCH_CHECK(dt_mesh_destroy(mesh));
    DT_BENCH_CHECK(dt_comm_destroy(world));
  }
  CApiWorld(const CApiWorld&) = delete;
  CApiWorld& operator=(const CApiWorld&) = delete;
};

}  // namespace dt::bench
