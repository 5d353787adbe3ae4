// What the FSDP engine costs per call, through the C API, for blocks so small that the call is all there is: the calls
// a framework's hooks make per block and step (dtensor.torch's, Note [Hook costs] in
// bindings/python/dtensor/torch/_hook_bodies.py), for GROUPS groups of one Linear(16, 16) each (a 16 x 16 weight and
// a 16 bias, float32), in the order of a step: forward (unshard, wait_unshard, unsharded_data, reshard), backward in
// reverse (the same, then export of the gathered values handed back as the gradients, accumulate_grad_dlpack twice,
// reduce_grads, reshard), then per group wait_reduce and export of the gradient shards. On one process every
// collective is over one rank (a local copy): the cost is the engine's; on more it includes the collectives.
// Reference, in alternating rounds: the same count of C API calls that do no engine work (dt_fsdp_group_memory on the
// same groups: the handle lookup, the argument checks and the funnel).
// Usage: dtrun --nproc-per-node N bench/engine_calls [GROUPS [STEPS]] (default 100 groups, 30 steps a round, 5
// rounds). Prints a table (us per block and step, median over rounds; every round's total) and one JSON line:
//   {"bench":"engine_calls","ranks":..,"groups":..,"phases_us":{..},"total_us":..,"total_us_rounds":[..],
//    "reference_us":..,"reference_us_rounds":[..],"calls_per_block":13}
#include <dtensor/c_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_rows.h"
#include "bench/c_api_bench.h"
#include "tools/args.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: dtrun --nproc-per-node N bench/engine_calls [GROUPS [STEPS]]\n"
    "  GROUPS  one-Linear(16, 16) groups (default 100); STEPS  steps per round (default 30)\n";

// The phases timed, in the table's order.
enum Phase { kUnshard, kWait, kData, kReshard, kAccumulate, kReduce, kWaitReduce, kExportGrads, kPhases };
const char* const kPhaseNames[kPhases] = {"unshard",     "wait_unshard",         "unsharded_data",
                                          "reshard",     "export+accumulate x2", "reduce_grads",
                                          "wait_reduce", "export grads"};
constexpr int kCallsPerBlock = 13;  // per block and step: 2+2+2+2 (both passes), 1+2 (backward), 1+1 (after)

class Timer {
 public:
  explicit Timer(double* into) : into_(into), t0_(Clock::now()) {}
  ~Timer() { *into_ += std::chrono::duration<double, std::micro>(Clock::now() - t0_).count(); }

 private:
  double* into_;
  Clock::time_point t0_;
};

// One step of every group; adds each phase's time (us, all groups) to `t`.
void step(const std::vector<dt_fsdp_group_t>& groups, double* t) {
  const size_t n = groups.size();
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t k = 0; k < n; ++k) {
      dt_fsdp_group_t g = groups[pass == 0 ? k : n - 1 - k];
      void* ptrs[2];
      {
        Timer tm(&t[kUnshard]);
        DT_BENCH_CHECK(dt_fsdp_group_unshard(g, 1));
      }
      {
        Timer tm(&t[kWait]);
        DT_BENCH_CHECK(dt_fsdp_group_wait_unshard(g));
      }
      {
        Timer tm(&t[kData]);
        DT_BENCH_CHECK(dt_fsdp_group_unsharded_data(g, ptrs, 2));
      }
      if (pass == 1) {
        {
          // The gathered values' blocks serve as the gradients (the same shapes; the engine takes them over).
          Timer tm(&t[kAccumulate]);
          DLManagedTensorVersioned* grads[2];
          DT_BENCH_CHECK(dt_fsdp_group_export(g, DT_FSDP_UNSHARDED_PARAMS, grads, 2));
          DT_BENCH_CHECK(dt_fsdp_group_accumulate_grad_dlpack(g, 0, grads[0]));
          DT_BENCH_CHECK(dt_fsdp_group_accumulate_grad_dlpack(g, 1, grads[1]));
        }
        Timer tm(&t[kReduce]);
        DT_BENCH_CHECK(dt_fsdp_group_reduce_grads(g));
      }
      Timer tm(&t[kReshard]);
      DT_BENCH_CHECK(dt_fsdp_group_reshard(g, 1));
    }
  }
  for (dt_fsdp_group_t g : groups) {
    {
      Timer tm(&t[kWaitReduce]);
      DT_BENCH_CHECK(dt_fsdp_group_wait_reduce(g));
    }
    DLManagedTensorVersioned* out[2];
    {
      Timer tm(&t[kExportGrads]);
      DT_BENCH_CHECK(dt_fsdp_group_export(g, DT_FSDP_SHARDED_GRADS, out, 2));
    }
    for (DLManagedTensorVersioned* m : out)
      if (m != nullptr) m->deleter(m);
  }
}

// The reference: kCallsPerBlock calls per group that go through the C API's funnel and do no engine work.
double reference_step(const std::vector<dt_fsdp_group_t>& groups) {
  const auto t0 = Clock::now();
  dt_fsdp_memory_t m;
  m.struct_size = sizeof m;
  for (dt_fsdp_group_t g : groups)
    for (int c = 0; c < kCallsPerBlock; ++c) DT_BENCH_CHECK(dt_fsdp_group_memory(g, &m));
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t ngroups = 100, steps = 30;
  dt::tools::parse_or_exit("bench/engine_calls", [&] {
    dt::tools::ArgReader(argc, argv, kUsage).operands(ngroups, steps);
    if (ngroups < 1 || steps < 1) throw dt::tools::UsageError{"GROUPS and STEPS must be positive"};
    return 0;
  });
  const dt::bench::CApiWorld capi;
  dt_comm_t world = capi.world;
  dt_mesh_t mesh = capi.mesh;
  const int32_t rank = capi.rank, size = capi.size;
  std::vector<float> w(256, 0.5f), b(16, 0.25f);
  int64_t wshape[2] = {16, 16}, bshape[1] = {16};
  const dt_placement_t replicate{DT_REPLICATE, 0, 0, -1};
  const char* names[2] = {"weight", "bias"};
  dt_fsdp_options_t options;
  dt_fsdp_options_init(&options);
  std::vector<dt_fsdp_group_t> groups(size_t(ngroups), nullptr);
  for (dt_fsdp_group_t& g : groups) {
    dt_buffer_t wb{w.data(), DT_FLOAT32, 2, wshape, nullptr, dt_cpu()};
    dt_buffer_t bb{b.data(), DT_FLOAT32, 1, bshape, nullptr, dt_cpu()};
    dt_tensor_t params[2];
    DT_BENCH_CHECK(dt_tensor_distribute(mesh, &wb, &replicate, 1, -1, &params[0]));
    DT_BENCH_CHECK(dt_tensor_distribute(mesh, &bb, &replicate, 1, -1, &params[1]));
    DT_BENCH_CHECK(dt_fsdp_group_create(mesh, "block", names, params, 2, &options, &g));
    DT_BENCH_CHECK(dt_tensor_destroy(params[0]));
    DT_BENCH_CHECK(dt_tensor_destroy(params[1]));
  }
  constexpr int kRounds = 5, kWarmup = 3;
  std::vector<std::vector<double>> phases(kPhases);
  std::vector<double> totals, refs;
  for (int i = 0; i < kWarmup; ++i) step(groups, std::vector<double>(kPhases, 0.0).data());
  for (int round = 0; round < kRounds; ++round) {
    for (int side = 0; side < 2; ++side) {
      DT_BENCH_CHECK(dt_comm_barrier(world));
      if ((side + round) % 2 == 1) {  // which side goes first alternates
        double ref = 0;
        for (int64_t s = 0; s < steps; ++s) ref += reference_step(groups);
        refs.push_back(ref / double(steps * ngroups));
        continue;
      }
      std::vector<double> t(kPhases, 0.0);
      for (int64_t s = 0; s < steps; ++s) step(groups, t.data());
      double total = 0;
      for (int p = 0; p < kPhases; ++p) {
        phases[size_t(p)].push_back(t[size_t(p)] / double(steps * ngroups));
        total += t[size_t(p)];
      }
      totals.push_back(total / double(steps * ngroups));
    }
  }
  if (rank == 0) {
    std::fprintf(stderr,
                 "engine_calls: %d rank(s), %lld groups of Linear(16, 16); us per block and step (median of %d "
                 "rounds)\n",
                 size, (long long)ngroups, kRounds);
    std::string json = "{\"bench\":\"engine_calls\",\"ranks\":" + std::to_string(size) +
                       ",\"groups\":" + std::to_string(ngroups) + ",\"phases_us\":{";
    for (int p = 0; p < kPhases; ++p) {
      const double v = dt::bench::median(phases[size_t(p)]);
      std::fprintf(stderr, "  %-22s %7.2f\n", kPhaseNames[p], v);
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s\"%s\":%.3f", p ? "," : "", kPhaseNames[p], v);
      json += buf;
    }
    auto rounds = [](const std::vector<double>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.3f", i ? "," : "", v[i]);
        s += buf;
      }
      return s + "]";
    };
    const double total = dt::bench::median(totals), ref = dt::bench::median(refs);
    std::fprintf(stderr, "  %-22s %7.2f   (%d calls; rounds %s)\n", "total", total, kCallsPerBlock,
                 rounds(totals).c_str());
    std::fprintf(stderr, "  %-22s %7.2f   (the same count of C API calls that do no engine work; rounds %s)\n",
                 "reference", ref, rounds(refs).c_str());
    char tail[160];
    std::snprintf(tail, sizeof tail, "},\"total_us\":%.3f,\"reference_us\":%.3f,\"calls_per_block\":%d", total, ref,
                  kCallsPerBlock);
    std::printf("%s%s,\"total_us_rounds\":%s,\"reference_us_rounds\":%s}\n", json.c_str(), tail, rounds(totals).c_str(),
                rounds(refs).c_str());
  }
  for (dt_fsdp_group_t g : groups) DT_BENCH_CHECK(dt_fsdp_group_destroy(g));
  return 0;
}
