// dtensor's side of bench/fsdp --model mlp: a stack of residual MLP blocks trained with AdamW, on one process or
// sharded with FSDP (fsdp/fully_shard.h), optionally on top of tensor parallelism on a (dp, tp) mesh. The PyTorch
// twin is bench/fsdp/torch_fsdp.py: the same model, loss, optimizer and flags.
//
//   build/bench/fsdp_mlp --batch 8 --threads 2 --json                                 (one process)
//   build/tools/dtrun --nproc-per-node 2 build/bench/fsdp_mlp --fsdp --dp 2 --batch 8 --json
//   build/tools/dtrun --nproc-per-node 4 build/bench/fsdp_mlp --fsdp --dp 2 --tp 2 --batch 8 --json
//
// The model: x [B, T, D] f32 ~ N(0, 1) (the global batch of each step is a seeded function of (seed, step); each dp
// rank makes its rows of it, torch.chunk's split); per block x = x + fc2(gelu(fc1(norm(x)))) with LayerNorm(D),
// Linear(D, hidden), GELU (erf), Linear(hidden, D), biases on; loss = mean of x_final^2 over all elements of the
// global batch. Each dp rank's loss is the sum over its rows divided by the global element count, and gradients are
// summed over dp (gradient_divide_factor 1): the gradient of the global mean for any split, so the losses of every
// mesh equal one process's to float rounding. TP plan: fc1 Colwise, fc2 Rowwise (norms replicated).
//
// --json: rank 0 prints per step {"step", "loss", "step_s", "rss_base_bytes", "rss_peak_bytes", "peak_bytes"}
// (step_s times forward, loss, backward, the optimizer step and zero_grad; the batch is made before the clock
// starts; rss_base is the process's RSS just before the model is built; peak_bytes the allocator's peak), then one
// line with the FSDP engine's communication counters over the steps after --warmup and the per-rank memory:
// {"comm": {...}, "memory": {...}}: RSS, the allocator's peak, the most held during the steps (dt::memory_usage's
// total peak, and rank 0's per kind) and the "theory" of Note [The MLP benchmark's memory from its shapes].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/memory_stats.h"
#include "core/process_memory.h"
#include "core/trace.h"
#include "dtensor/dtensor.h"
#include "dtensor/ops.h"
#include "examples/program_world.h"
#include "fsdp/fully_shard.h"
#include "nn/layers.h"
#include "nn/optim.h"
#include "nn/parallel.h"
#include "placement/layout.h"
#include "tools/args.h"

namespace {

struct Args {
  int64_t dp = 1, tp = 1, layers = 4, dim = 512, hidden = 0, batch = 2, seq = 128, steps = 10, seed = 0;
  int64_t threads = 0, warmup = 3;
  double lr = 1e-3;
  bool fsdp = false, json = false;
};

constexpr const char* kUsage =
    "usage: fsdp_mlp [--fsdp] [--dp D] [--tp T] [--layers 4] [--dim 512] [--hidden 4*dim] [--batch 2]\n"
    "                [--seq 128] [--steps 10] [--warmup 3] [--seed 0] [--lr 1e-3] [--threads N] [--json]\n"
    "Run under dtrun with D * T processes (or one process for D = T = 1). --fsdp: fully_shard each block\n"
    "and the root over the dp dim (without it, dp > 1 all-reduces the gradients).\n";

using dt::tools::UsageError;

Args parse(int argc, char** argv) {
  Args a;
  dt::tools::ArgReader args(argc, argv, kUsage);
  while (args.next()) {
    if (args.take("--dp", a.dp) || args.take("--tp", a.tp) || args.take("--layers", a.layers) ||
        args.take("--dim", a.dim) || args.take("--hidden", a.hidden) || args.take("--batch", a.batch) ||
        args.take("--seq", a.seq) || args.take("--steps", a.steps) || args.take("--warmup", a.warmup) ||
        args.take("--seed", a.seed) || args.take("--lr", a.lr) || args.take("--threads", a.threads) ||
        args.take("--fsdp", a.fsdp) || args.take("--json", a.json))
      continue;
    throw args.unexpected();
  }
  if (a.hidden == 0) a.hidden = 4 * a.dim;
  if (a.dp < 1 || a.tp < 1 || a.layers < 1 || a.dim < 1 || a.hidden < 1 || a.batch < 1 || a.seq < 1 || a.steps < 0 ||
      a.warmup < 0 || a.threads < 0)
    throw UsageError{"sizes must be positive (steps, warmup, threads: at least 0)"};
  return a;
}

// x + fc2(gelu(fc1(norm(x)))): the names (norm, fc1, fc2) are the twin's.
class Block : public dt::nn::Module {
 public:
  Block(int64_t dim, int64_t hidden) : Module("Block") {
    norm = register_module("norm", std::make_shared<dt::nn::LayerNorm>(dim));
    fc1 = register_module("fc1", std::make_shared<dt::nn::Linear>(dim, hidden));
    fc2 = register_module("fc2", std::make_shared<dt::nn::Linear>(hidden, dim));
  }
  std::vector<dt::nn::Variable> forward(const std::vector<dt::nn::Variable>& in) override {
    const dt::nn::Variable& x = in.at(0);
    return {dt::nn::add(x, (*fc2)(dt::nn::gelu((*fc1)((*norm)(x)))))};
  }
  std::shared_ptr<dt::nn::LayerNorm> norm;
  std::shared_ptr<dt::nn::Linear> fc1, fc2;
};

class Mlp : public dt::nn::Module {
 public:
  Mlp(int64_t layers_count, int64_t dim, int64_t hidden) : Module("Mlp") {
    layers = register_module("layers", std::make_shared<dt::nn::ModuleList>());
    for (int64_t i = 0; i < layers_count; ++i) {
      blocks.push_back(std::make_shared<Block>(dim, hidden));
      layers->append(blocks.back());
    }
  }
  std::vector<dt::nn::Variable> forward(const std::vector<dt::nn::Variable>& in) override {
    dt::nn::Variable x = in.at(0);
    for (auto& b : blocks) x = (*b)(x);
    return {x};
  }
  std::shared_ptr<dt::nn::ModuleList> layers;
  std::vector<std::shared_ptr<Block>> blocks;
};

// Note [The MLP benchmark's memory from its shapes]
// What one rank must hold at the peak of a step (f32, bytes), from the shapes alone; the benchmark compares the most
// the rank held during the steps (the memory accounting's total peak, core/memory_stats.h) with it. N = this rank's
// tokens (rows * seq), D = dim, H = hidden / tp, S = the bytes of this rank's parameters (its shards with FSDP), U =
// one block's gathered parameters on this rank (FSDP only).
//   always:      the parameters and AdamW's two moments, 3 S;
//   at the optimizer step: the gradients too, S more (the activations are gone by then);
//   at the start of backward: every activation the forward saved, A: per block the input and the norm's output
//               (2 N D), fc1's and gelu's outputs (2 N H), the norm's mean and rstd (2 N), plus the final output
//               the loss saves (N D); the backward's transients, a gradient of fc1's and of gelu's output (2 N H);
//               with FSDP, 4 U gathered: the current block's and the prefetched block's parameters, the current
//               block's unsharded gradients and its flat reduce-scatter input.
//   theory = 3 S + max(S, A + transients + gathered).
// Pools round blocks up and kernels' scratch is not counted: a ratio near 1.0 (at most 1.1) is the expected reading.
struct MemoryTheory {
  int64_t params_and_moments = 0, grads = 0, activations = 0, transients = 0, gathered = 0;
  int64_t total() const { return params_and_moments + std::max(grads, activations + transients + gathered); }
};

MemoryTheory memory_theory(const Args& a, int64_t rows, int64_t local_param_bytes, int64_t group_unsharded_bytes) {
  const int64_t n = rows * a.seq, d = a.dim, h = (a.hidden + a.tp - 1) / a.tp, f = int64_t(sizeof(float));
  MemoryTheory t;
  t.params_and_moments = 3 * local_param_bytes;
  t.grads = local_param_bytes;
  t.activations = (a.layers * (2 * n * d + 2 * n * h + 2 * n) + n * d) * f;
  t.transients = 2 * n * h * f;
  t.gathered = a.fsdp ? 4 * group_unsharded_bytes : 0;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = dt::tools::parse_or_exit("fsdp_mlp", [&] { return parse(argc, argv); });
  try {
    const dt::examples::ProgramWorld program = dt::examples::join_world(a.threads);
    const dt::CommunicatorPtr& world = program.world;
    const bool launched = program.launched;
    const int threads = program.threads;
    const bool lead = world->rank() == 0;
    if (!dt::examples::check_ranks(*world, a.dp, a.tp, "fsdp_mlp")) return 2;
    // The FSDP engine's communication over the measured steps (reset after the warm-up).
    dt::fsdp::CommStatsObserver comm;
    const dt::fsdp::ScopedCommObserver observing(comm);
    dt::DeviceMesh mesh = dt::DeviceMesh::create(dt::DeviceType::kCPU, {a.dp, a.tp}, {"dp", "tp"});
    dt::DeviceMesh tp = mesh["tp"], dp = mesh["dp"];
    const int64_t rss_base = dt::process_rss_bytes();

    auto model = std::make_shared<Mlp>(a.layers, a.dim, a.hidden);
    if (a.tp > 1)
      dt::nn::parallelize_module(
          model, tp, {{"layers.*.fc1", dt::nn::ColwiseParallel()}, {"layers.*.fc2", dt::nn::RowwiseParallel()}});
    model->materialize(tp, uint64_t(a.seed));
    int64_t num_params = 0;  // global element count
    for (const auto& p : model->parameters()) num_params += p.data().numel();
    int64_t group_unsharded = 0;  // this rank's bytes of one block's gathered parameters
    for (const auto& p : model->blocks.front()->parameters())
      group_unsharded += p.data().to_local().numel() * int64_t(sizeof(float));
    if (a.fsdp) {
      // Gradients summed over dp: each rank's loss is already its share of the global mean.
      dt::fsdp::FsdpOptions options;
      options.gradient_divide_factor = 1.0;
      for (auto& block : model->blocks) dt::fsdp::fully_shard(block, dp, options);
      dt::fsdp::fully_shard(model, dp, options);
    }
    const std::vector<dt::nn::Variable> params = model->parameters();
    int64_t local_param_bytes = 0;
    for (const auto& p : params) local_param_bytes += p.data().to_local().numel() * int64_t(sizeof(float));
    dt::nn::AdamW opt(params, {.lr = a.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
    const dt::Device device = mesh.device();
    // The accounting's peaks from here on: the steps', not materialize's (whole parameters before sharding).
    dt::reset_peak_memory(device);

    // This dp rank's rows of the global batch (torch.chunk's split: uneven batches are fine).
    const int64_t dp_rank = dp.local_rank(0);
    const dt::IndexRange my_rows = dt::chunk_range(a.batch, a.dp, dp_rank);
    const int64_t row0 = my_rows.begin, rows = my_rows.size();
    const double elements = double(a.batch * a.seq * a.dim);
    const MemoryTheory theory = memory_theory(a, rows, local_param_bytes, group_unsharded);
    if (lead && !a.json)
      std::printf(
          "fsdp_mlp: %lld blocks, dim %lld, hidden %lld, batch %lld x seq %lld; %lld parameters; mesh (dp %lld, "
          "tp %lld)%s, %d thread(s) per rank\n",
          (long long)a.layers, (long long)a.dim, (long long)a.hidden, (long long)a.batch, (long long)a.seq,
          (long long)num_params, (long long)a.dp, (long long)a.tp, a.fsdp ? ", FSDP over dp" : "", threads);
    for (int64_t step = 1; step <= a.steps; ++step) {
      dt::trace::StepSpan step_span(step);  // DT_TRACE: the step in the timeline (bench/trace)
      if (step == a.warmup + 1) comm.reset();
      const dt::Tensor x = dt::Tensor::randn_block({a.batch, a.seq, a.dim}, {row0, 0, 0}, {rows, a.seq, a.dim},
                                                   uint64_t(a.seed) * 1000003u + uint64_t(step));
      const auto t0 = std::chrono::steady_clock::now();
      dt::nn::Variable y = (*model)(dt::nn::Variable(dt::as_replicate(x, tp)));
      dt::nn::Variable loss = dt::nn::div(dt::nn::sum(dt::nn::mul(y, y)), elements);
      loss.backward();
      if (!a.fsdp && a.dp > 1) dt::nn::all_reduce_gradients(params, dp, dt::ReduceOp::kSum);
      opt.step();
      opt.zero_grad();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      dt::Tensor l = loss.full_tensor().to(dt::DType::f64);
      if (a.dp > 1) dp.comm(0)->all_reduce(l, dt::ReduceOp::kSum)->wait();
      const double value = l.data<double>()[0];
      if (lead) {
        const double peak = double(dt::allocator_for(device).peak_allocated_bytes());
        if (a.json)
          std::printf(
              "{\"step\":%lld,\"loss\":%.8g,\"step_s\":%.6f,\"rss_base_bytes\":%lld,\"rss_peak_bytes\":%lld,"
              "\"peak_bytes\":%.0f}\n",
              (long long)step, value, secs, (long long)rss_base, (long long)dt::process_peak_rss_bytes(), peak);
        else
          std::printf(
              "step %4lld  loss %.6f  %8.2f ms  allocator peak %.1f MiB  RSS peak above the footprint %.1f "
              "MiB\n",
              (long long)step, value, secs * 1e3, peak / 1048576.0,
              double(dt::process_peak_rss_bytes() - rss_base) / 1048576.0);
        std::fflush(stdout);
      }
    }

    // Per rank: RSS footprint and peak, allocator peak, the accounting's peak of the steps; gathered to rank 0 for
    // the summary line.
    const dt::MemoryUsage usage = dt::memory_usage(device);
    constexpr int kCols = 4;
    dt::Tensor mine = dt::Tensor::empty({kCols}, dt::DType::i64);
    mine.data<int64_t>()[0] = rss_base;
    mine.data<int64_t>()[1] = dt::process_peak_rss_bytes();
    mine.data<int64_t>()[2] = int64_t(dt::allocator_for(device).peak_allocated_bytes());
    mine.data<int64_t>()[3] = usage.total_peak;
    dt::Tensor all = dt::Tensor::empty({world->size(), kCols}, dt::DType::i64);
    world->all_gather(mine, all)->wait();
    const dt::fsdp::CommStats c = comm.stats();
    if (lead) {
      auto list = [&](int col) {
        std::string s = "[";
        for (int64_t r = 0; r < world->size(); ++r)
          s += (r ? "," : "") + std::to_string(all.data<int64_t>()[r * kCols + col]);
        return s + "]";
      };
      const double hidden = c.issued_s > 0 ? 1.0 - c.exposed_s / c.issued_s : 0.0;
      std::string kinds = "{";  // rank 0's peak per kind
      for (size_t k = 0; k < dt::kMemoryKinds; ++k)
        kinds += std::string(k ? "," : "") + "\"" + dt::memory_kind_name(dt::MemoryKind(k)) +
                 "\":" + std::to_string(usage.peak[k]);
      kinds += "}";
      std::printf(
          "{\"impl\":\"dtensor\",\"fsdp\":%s,\"params\":%lld,\"threads\":%d,\"dp\":%lld,\"tp\":%lld,"
          "\"comm\":{\"steps\":%lld,\"issued_s\":%.6f,\"exposed_s\":%.6f,\"hidden_share\":%.4f,"
          "\"all_gathers\":%lld,\"reduce_scatters\":%lld,\"all_reduces\":%lld,\"bytes\":%lld},"
          "\"memory\":{\"rss_base_bytes_per_rank\":%s,\"rss_peak_bytes_per_rank\":%s,"
          "\"peak_bytes_per_rank\":%s,\"held_peak_bytes_per_rank\":%s,\"held_peak_by_kind\":%s,\"theory_bytes\":%lld,"
          "\"theory\":{\"params_and_moments\":%lld,\"grads\":%lld,"
          "\"activations\":%lld,\"transients\":%lld,\"gathered\":%lld}}}\n",
          a.fsdp ? "true" : "false", (long long)num_params, threads, (long long)a.dp, (long long)a.tp,
          (long long)std::max<int64_t>(0, a.steps - a.warmup), c.issued_s, c.exposed_s, hidden,
          (long long)c.all_gathers, (long long)c.reduce_scatters, (long long)c.all_reduces, (long long)c.bytes,
          list(0).c_str(), list(1).c_str(), list(2).c_str(), list(3).c_str(), kinds.c_str(), (long long)theory.total(),
          (long long)theory.params_and_moments, (long long)theory.grads, (long long)theory.activations,
          (long long)theory.transients, (long long)theory.gathered);
      if (!a.json)
        std::printf(
            "communication hidden behind compute: %.0f%% (%.3f s issued, %.3f s exposed); rank 0 held at most %.1f "
            "MiB (allocator peak %.1f MiB) against %.1f MiB in theory\nmemory over the steps (rank 0): %s\n",
            100 * hidden, c.issued_s, c.exposed_s, double(usage.total_peak) / 1048576.0,
            double(all.data<int64_t>()[2]) / 1048576.0, double(theory.total()) / 1048576.0,
            dt::format_memory_usage(usage).c_str());
      std::fflush(stdout);
    }
    if (launched) dt::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "fsdp_mlp: " << e.what() << "\n";
    return 1;
  }
}
