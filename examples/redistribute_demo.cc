// The dtensor demo: 4 processes on a 2x2 (dp, tp) mesh distribute a matrix, walk it through a chain of
// redistributions (even, uneven and Partial), print the sharding tables and the communication counts, check every
// step against the full tensor, and end with a one-line summary.
//
//   build/tools/dtrun --nproc-per-node 4 build/examples/redistribute_demo
#include <cstdio>
#include <iostream>
#include <sstream>

#include "collectives/process_group.h"
#include "dtensor/comm_counter.h"
#include "dtensor/dtensor.h"
#include "dtensor/visualize.h"
#include "placement/layout.h"
#include "placement/planner.h"

namespace {

std::string indent(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) out += prefix + line + "\n";
  return out;
}

struct Step {
  const char* why;
  std::vector<dt::Placement> to;
};

}  // namespace

int main() {
  try {
    dt::CommunicatorPtr world = dt::init_process_group();
    const bool lead = world->rank() == 0;
    auto mesh = dt::DeviceMesh::create(dt::Device::cpu(), {2, 2}, {"dp", "tp"});
    // 7 x 5: uneven on both dims over 2 ranks (4 + 3 rows, 3 + 2 columns). Every rank builds the same tensor.
    dt::Tensor full = dt::Tensor::randn({7, 5}, /*seed=*/2024);
    dt::DTensor x = dt::distribute_tensor(full, mesh, {dt::Shard(0), dt::Replicate()});
    if (lead) std::cout << dt::visualize_sharding(x) << "\n";

    const std::vector<Step> chain = {
        {"shard columns over tp too", {dt::Shard(0), dt::Shard(1)}},
        {"swap the sharded dims (two all-to-alls)", {dt::Shard(1), dt::Shard(0)}},
        {"gather rows back: replicate over dp", {dt::Replicate(), dt::Shard(0)}},
        {"make tp partial sums (exact: only coordinate 0 keeps values)", {dt::Replicate(), dt::Partial()}},
        {"reduce-scatter the partial sums onto rows", {dt::Replicate(), dt::Shard(0)}},
        {"nested: dp then tp both shard rows", {dt::Shard(0), dt::Shard(0)}},
        {"partial max over dp", {dt::Partial(dt::ReduceOp::kMax), dt::Shard(1)}},
        {"everything replicated", {dt::Replicate(), dt::Replicate()}},
    };
    int64_t total_collectives = 0, total_bytes = 0;
    int ok = 0;
    for (size_t i = 0; i < chain.size(); ++i) {
      const Step& s = chain[i];
      const dt::Plan& plan = dt::plan_redistribution(mesh.shape(), x.shape(), x.to_local().element_size(),
                                                     x.spec(), dt::ShardingSpec(s.to));
      dt::CommCounter counter(mesh);
      dt::DTensor y = x.redistribute(s.to);
      std::string counts = counter.summary();
      total_collectives += counter.total();
      for (auto& r : counter.records()) total_bytes += r.bytes;
      bool exact = dt::equal(y.full_tensor(), full);
      ok += exact;
      if (lead) {
        std::printf("step %zu: %s -> %s  (%s)\n", i + 1, x.spec().to_string().c_str(), y.spec().to_string().c_str(),
                    s.why);
        std::printf("  plan: %zu step(s), cost %.2e s; communication: %s; full tensor %s\n", plan.steps.size(),
                    plan.cost, counts.c_str(), exact ? "exact" : "WRONG");
        if (!y.spec().has_partial()) std::cout << indent(dt::visualize_sharding(y), "  ");
      }
      x = y;
    }
    if (lead)
      std::printf("demo: %d/%zu redistributions exact on a 2x2 (dp, tp) mesh over %d processes, %lld collectives, "
                  "%lld bytes sent per rank\n",
                  ok, chain.size(), world->size(), (long long)total_collectives, (long long)total_bytes);
    return ok == int(chain.size()) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "demo failed: %s\n", e.what());
    return 1;
  }
}
