// What the C API adds to a call: the same redistributions through DTensor::redistribute (C++) and through
// dt_tensor_redistribute + dt_tensor_destroy (the C ABI: handle lookups, argument checks, the funnel), alternating
// in rounds on the same tensors, under dtrun (2 processes are the judged case; the target is at most 2 us
// added per call). Usage: c_api_overhead [ROWS COLS] (the float32 tensor, 64 x 16 by default;
// examples/python/call_overhead.py times 4 x 4). Prints a table and one JSON line per case and clock (wall, and this
// thread's CPU time, which a loaded machine disturbs less), the median and the best of the rounds:
//   {"bench":"c_api_overhead","case":..,"ranks":..,"shape":"RxC","clock":..,"cpp_us":..,"c_us":..,"added_us":..,
//    "cpp_best_us":..,"c_best_us":..,"added_best_us":..}
#include <dtensor/c_api.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "bench/c_api_bench.h"
#include "bindings/c_api/handles.h"
#include "collectives/process_group.h"
#include "dtensor/dtensor.h"
#include "tools/args.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// This thread's CPU time in microseconds (time.thread_time() in Python).
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) * 1e-3;
}

constexpr const char* kUsage =
    "usage: dtrun --nproc-per-node N bench/c_api_overhead [ROWS COLS]\n"
    "  ROWS COLS  the float32 tensor's shape (default 64 16)\n";

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 64, cols = 16;
  dt::tools::parse_or_exit("bench/c_api_overhead", [&] {
    const int given = dt::tools::ArgReader(argc, argv, kUsage).operands(rows, cols);
    if (given == 1) throw dt::tools::UsageError{"ROWS needs COLS"};
    if (rows < 1 || cols < 1) throw dt::tools::UsageError{"ROWS and COLS must be positive"};
    return given;
  });
  const dt::bench::CApiWorld capi;
  dt_comm_t world = capi.world;
  dt_mesh_t mesh = capi.mesh;
  const int32_t rank = capi.rank, size = capi.size;
  struct Case {
    const char* name;
    dt_placement_t from, to;
  };
  // R -> S(0): a local slice (no communication: the whole call is overhead); S(0) -> R: a small all-gather.
  const std::vector<Case> cases{{"R->S(0) local slice", {DT_REPLICATE, 0, 0, -1}, {DT_SHARD, 0, 0, -1}},
                                {"S(0)->R all-gather", {DT_SHARD, 0, 0, -1}, {DT_REPLICATE, 0, 0, -1}}};
  std::vector<float> full(size_t(rows * cols), 1.0f);
  int64_t shape[2] = {rows, cols};
  dt_buffer_t b{full.data(), DT_FLOAT32, 2, shape, nullptr, dt_cpu()};
  if (rank == 0)
    std::printf("%lld x %lld float32; us per call, best / median of the rounds\n%-22s %6s %5s %17s %17s %17s\n",
                (long long)rows, (long long)cols, "case", "ranks", "clock", "C++ us", "C us", "added us");
  constexpr int kCalls = 2000, kRounds = 7;
  for (const Case& c : cases) {
    dt_tensor_t x;
    DT_BENCH_CHECK(dt_tensor_distribute(mesh, &b, &c.from, 1, -1, &x));
    const dt::DTensor cpp_x = dt::capi::get<dt::capi::TensorObject>(x, "x")->tensor;
    const std::vector<dt::Placement> to{c.to.kind == DT_SHARD ? dt::Placement(dt::Shard{0})
                                                              : dt::Placement(dt::Replicate{})};
    std::vector<double> cpp_us, c_us, cpp_cpu_us, c_cpu_us;
    for (int round = 0; round < kRounds; ++round) {
      for (int side = 0; side < 2; ++side) {
        const bool c_side = (side + round) % 2 == 1;  // which side goes first alternates
        DT_BENCH_CHECK(dt_comm_barrier(world));
        const auto t0 = Clock::now();
        const double cpu0 = thread_cpu_us();
        for (int i = 0; i < kCalls; ++i) {
          if (c_side) {
            dt_tensor_t y;
            DT_BENCH_CHECK(dt_tensor_redistribute(x, &c.to, 1, &y));
            DT_BENCH_CHECK(dt_tensor_destroy(y));
          } else {
            const dt::DTensor y = cpp_x.redistribute(to);
            (void)y;
          }
        }
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kCalls;
        (c_side ? c_us : cpp_us).push_back(us);
        (c_side ? c_cpu_us : cpp_cpu_us).push_back((thread_cpu_us() - cpu0) / kCalls);
      }
    }
    for (const auto& [clock, cpp, cc] : {std::tuple{"wall", &cpp_us, &c_us}, {"cpu", &cpp_cpu_us, &c_cpu_us}}) {
      const double a = median(*cpp), m = median(*cc), ab = best(*cpp), mb = best(*cc);
      if (rank != 0) continue;
      std::printf("%-22s %6d %5s %8.2f /%7.2f %8.2f /%7.2f %8.2f /%7.2f\n", c.name, size, clock, ab, a, mb, m, mb - ab,
                  m - a);
      std::printf(
          "{\"bench\":\"c_api_overhead\",\"case\":\"%s\",\"ranks\":%d,\"shape\":\"%lldx%lld\",\"clock\":\"%s\","
          "\"cpp_us\":%.3f,\"c_us\":%.3f,\"added_us\":%.3f,\"cpp_best_us\":%.3f,\"c_best_us\":%.3f,"
          "\"added_best_us\":%.3f}\n",
          c.name, size, (long long)rows, (long long)cols, clock, a, m, m - a, ab, mb, mb - ab);
    }
    DT_BENCH_CHECK(dt_tensor_destroy(x));
  }
  return 0;
}
