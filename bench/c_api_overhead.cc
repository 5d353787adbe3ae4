// What the C API adds to a call: the same redistributions through DTensor::redistribute (C++) and through
// dt_tensor_redistribute + dt_tensor_destroy (the C ABI: handle lookups, argument checks, the funnel), alternating
// in rounds on the same tensors, under dtrun (2 processes are the judged case; the target is at most 2 us
// added per call). Prints a table and one JSON line per row:
//   {"bench":"c_api_overhead","case":..,"ranks":..,"cpp_us":..,"c_us":..,"added_us":..}
#include <dtensor/c_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bindings/c_api/handles.h"
#include "collectives/process_group.h"
#include "dtensor/dtensor.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#define CHECK(call)                                                         \
  do {                                                                      \
    if ((call) != DT_OK) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, dt_last_error());      \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

}  // namespace

int main() {
  dt_comm_t world;
  CHECK(dt_init_from_env(nullptr, &world));
  int32_t rank = 0, size = 1;
  CHECK(dt_comm_rank(world, &rank));
  CHECK(dt_comm_size(world, &size));
  int64_t sizes[1] = {size};
  dt_mesh_t mesh;
  CHECK(dt_mesh_create(world, dt_cpu(), sizes, 1, nullptr, &mesh));
  struct Case {
    const char* name;
    dt_placement_t from, to;
  };
  // R -> S(0): a local slice (no communication: the whole call is overhead); S(0) -> R: a small all-gather.
  const std::vector<Case> cases{{"R->S(0) local slice", {DT_REPLICATE, 0, 0, -1}, {DT_SHARD, 0, 0, -1}},
                                {"S(0)->R all-gather", {DT_SHARD, 0, 0, -1}, {DT_REPLICATE, 0, 0, -1}}};
  std::vector<float> full(64 * 16, 1.0f);
  int64_t shape[2] = {64, 16};
  dt_buffer_t b{full.data(), DT_FLOAT32, 2, shape, nullptr, dt_cpu()};
  if (rank == 0)
    std::printf("%-22s %6s %10s %10s %10s\n", "case", "ranks", "C++ us", "C us", "added us");
  constexpr int kCalls = 2000, kRounds = 7;
  for (const Case& c : cases) {
    dt_tensor_t x;
    CHECK(dt_tensor_distribute(mesh, &b, &c.from, 1, -1, &x));
    const dt::DTensor cpp_x = dt::capi::get<dt::capi::TensorObject>(x, "x")->tensor;
    const std::vector<dt::Placement> to{c.to.kind == DT_SHARD ? dt::Placement(dt::Shard{0}) : dt::Placement(dt::Replicate{})};
    std::vector<double> cpp_us, c_us;
    for (int round = 0; round < kRounds; ++round) {
      for (int side = 0; side < 2; ++side) {
        const bool c_side = (side + round) % 2 == 1;  // which side goes first alternates
        CHECK(dt_comm_barrier(world));
        const auto t0 = Clock::now();
        for (int i = 0; i < kCalls; ++i) {
          if (c_side) {
            dt_tensor_t y;
            CHECK(dt_tensor_redistribute(x, &c.to, 1, &y));
            CHECK(dt_tensor_destroy(y));
          } else {
            const dt::DTensor y = cpp_x.redistribute(to);
            (void)y;
          }
        }
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kCalls;
        (c_side ? c_us : cpp_us).push_back(us);
      }
    }
    const double a = median(cpp_us), m = median(c_us);
    if (rank == 0) {
      std::printf("%-22s %6d %10.2f %10.2f %10.2f\n", c.name, size, a, m, m - a);
      std::printf("{\"bench\":\"c_api_overhead\",\"case\":\"%s\",\"ranks\":%d,\"cpp_us\":%.3f,\"c_us\":%.3f,"
                  "\"added_us\":%.3f}\n",
                  c.name, size, a, m, m - a);
    }
    CHECK(dt_tensor_destroy(x));
  }
  CHECK(dt_mesh_destroy(mesh));
  CHECK(dt_comm_destroy(world));
  return 0;
}
