// The dtensor demo: 4 processes on a 2x2 (dp, tp) mesh distribute a matrix, walk it through a chain of
// redistributions (even, uneven and Partial), print the sharding tables and the communication counts, check every
// step against the full tensor; then run a tensor-parallel MLP with a loss-parallel cross-entropy on the same mesh
// and compare it with the single-process computation; and end with a one-line summary.
//
//   build/tools/dtrun --nproc-per-node 4 build/examples/redistribute_demo
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "collectives/process_group.h"
#include "dtensor/comm_counter.h"
#include "dtensor/dtensor.h"
#include "dtensor/ops.h"
#include "dtensor/visualize.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/matmul.h"
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
  dt::ShardOrder order;  // nested sharding order (empty: ascending mesh dims)
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
        {"shard columns over tp too", {dt::Shard(0), dt::Shard(1)}, {}},
        {"swap which mesh dim shards which tensor dim", {dt::Shard(1), dt::Shard(0)}, {}},
        {"gather over dp", {dt::Replicate(), dt::Shard(0)}, {}},
        {"gather over tp: replicated everywhere", {dt::Replicate(), dt::Replicate()}, {}},
        {"tp partial sums (exact: only tp coordinate 0 keeps values)", {dt::Replicate(), dt::Partial()}, {}},
        {"reduce-scatter the partial sums onto rows", {dt::Replicate(), dt::Shard(0)}, {}},
        {"FSDP on top of TP: dp shards each tp row block (order tp, dp)", {dt::Shard(0), dt::Shard(0)}, {{0, {1, 0}}}},
        {"columns over tp", {dt::Replicate(), dt::Shard(1)}, {}},
        {"partial max over dp", {dt::Partial(dt::ReduceOp::kMax), dt::Shard(1)}, {}},
        {"everything replicated", {dt::Replicate(), dt::Replicate()}, {}},
    };
    int64_t total_collectives = 0, total_bytes = 0;
    int ok = 0;
    for (size_t i = 0; i < chain.size(); ++i) {
      const Step& s = chain[i];
      const dt::Plan& plan = dt::plan_redistribution(mesh.shape(), x.shape(), x.to_local().element_size(), x.spec(),
                                                     dt::ShardingSpec(s.to, s.order));
      dt::CommCounter counter(mesh);
      dt::DTensor y = x.redistribute(s.to, s.order);
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

    // Part 2: tensor parallelism on tp, data parallelism on dp. Column-parallel then row-parallel linear, then a
    // column-parallel output projection and a loss-parallel cross-entropy over the class-sharded logits.
    const int64_t B = 7, D = 64, H = 128, V = 4096;  // 7 rows: uneven over dp; a vocabulary worth sharding
    dt::Tensor xs = dt::Tensor::randn({B, D}, 1), w1 = dt::Tensor::randn({H, D}, 2, dt::DType::f32, 0, 0.3);
    dt::Tensor w2 = dt::Tensor::randn({D, H}, 3, dt::DType::f32, 0, 0.3),
               w3 = dt::Tensor::randn({V, D}, 4, dt::DType::f32, 0, 0.05);
    dt::Tensor ids = dt::Tensor::rand({B}, 5, dt::DType::i64, 0, double(V));
    // distribute_tensor scatters rank 0's tensors (each rank receives only its block); the counter below counts the
    // model's own communication, from the first layer on.
    auto X = dt::distribute_tensor(xs, mesh, {dt::Shard(0), dt::Replicate()});
    auto W1 = dt::distribute_tensor(w1, mesh, {dt::Replicate(), dt::Shard(0)});  // colwise
    auto W2 = dt::distribute_tensor(w2, mesh, {dt::Replicate(), dt::Shard(1)});  // rowwise
    auto W3 = dt::distribute_tensor(w3, mesh, {dt::Replicate(), dt::Shard(0)});  // colwise: class-sharded logits
    auto T = dt::distribute_tensor(ids, mesh, {dt::Shard(0), dt::Replicate()});
    dt::CommCounter mlp_counter(mesh);
    auto Hd = dt::gelu(dt::linear(X, W1));     // (S(0), S(1)): no communication
    auto Y = dt::linear(Hd, W2);               // (S(0), P(sum)): partial sums over tp
    auto logits = dt::linear(Y, W3);           // one all-reduce of Y on tp, logits (S(0), S(1))
    auto loss = dt::cross_entropy(logits, T);  // loss parallel: all-reduces of row max and sum-exp, no gather
    double got = loss.full_tensor().item();
    std::string mlp_counts = mlp_counter.summary();
    namespace k = dt::kernels;
    double want = k::cross_entropy(k::linear(k::linear(k::gelu(k::linear(xs, w1)), w2), w3), ids).loss.item();
    bool mlp_ok = std::abs(got - want) <= 1e-5 * std::max(1.0, std::abs(want));
    bool no_gather = mlp_counter.count(dt::CollectiveKind::kAllGather) == 0;
    if (lead) {
      std::printf("\ntensor-parallel MLP + loss parallel on %s:\n", mesh.shape().to_string().c_str());
      std::printf("  hidden %s, output %s, logits %s\n", Hd.spec().to_string().c_str(), Y.spec().to_string().c_str(),
                  logits.spec().to_string().c_str());
      std::printf("  loss %.6f (single process %.6f) %s; communication: %s; logits all-gathered: %s\n", got, want,
                  mlp_ok ? "match" : "MISMATCH", mlp_counts.c_str(), no_gather ? "never" : "YES");
    }
    ok += mlp_ok && no_gather;

    if (lead)
      std::printf(
          "demo: %d/%zu redistributions exact on a 2x2 (dp, tp) mesh over %d processes, %lld collectives, "
          "%lld bytes sent per rank\n",
          ok - int(mlp_ok && no_gather), chain.size(), world->size(), (long long)total_collectives,
          (long long)total_bytes);
    if (lead)
      std::printf("demo: tensor-parallel MLP loss %s the single-process loss\n", mlp_ok ? "matches" : "DIFFERS FROM");
    world->barrier()->wait();
    dt::destroy_process_group();
    return ok == int(chain.size()) + 1 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "demo failed: %s\n", e.what());
    return 1;
  }
}
