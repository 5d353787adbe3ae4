// Trains a GPT (nn/gpt.h) on a synthetic corpus with a known entropy floor, on a (dp, tp) mesh: the batch is
// sharded over dp (gradients averaged by one all-reduce per step), the model over tp with the Megatron plan (loss
// parallel included). Any mesh trains the same model from the same initial weights on the same data: the losses of
// one process and of TP = 2 or 4 agree to float rounding.
//
//   build/tools/dtrun --nproc-per-node 4 build/examples/train_gpt --dp 2 --tp 2 --steps 20
//   build/examples/train_gpt --steps 200 --json
//
// With --pp P the blocks are cut into P pipeline stages (pipeline/gpt_stage.h; --stages-per-rank V for the interleaved
// schedule), run by pipeline::PipelineRunner with --pp-schedule (gpipe, 1f1b, interleaved, zb-h1) over
// --microbatches M per step, on a (pp, dp, tp) mesh; the losses are those of one process.
//
//   build/tools/dtrun --nproc-per-node 4 build/examples/train_gpt --pp 2 --dp 2 --fsdp --microbatches 4 --steps 20
//
// The corpus: a seeded first-order Markov source. Every token has `successors` distinct next tokens, each equally
// likely, so no model can beat ln(successors) nats per predicted token: the entropy floor the example prints.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <string>

#include "core/allocator.h"
#include "core/error_file.h"
#include "core/memory_stats.h"
#include "core/process_memory.h"
#include "core/splitmix.h"
#include "core/trace.h"
#include "dtensor/dtensor.h"
#include "dtensor/ops.h"
#include "examples/program_world.h"
#include "fsdp/fully_shard.h"
#include "fsdp/fully_shard_memory.h"
#include "nn/checkpoint.h"
#include "nn/models/gpt.h"
#include "nn/models/hf.h"
#include "nn/optim.h"
#include "pipeline/checkpoint.h"
#include "pipeline/gpt_stage.h"
#include "pipeline/runner.h"
#include "pipeline/schedule_builders.h"
#include "pipeline/simulate.h"
#include "placement/layout.h"
#include "tools/args.h"
#include "train/lr_schedule.h"
#include "train/resize.h"

namespace {

struct Args {
  int64_t dp = 1, tp = 1, layers = 2, dim = 128, heads = 4, vocab = 512, seq = 64, batch = 8, steps = 20;
  int64_t hidden = 0, seed = 0, threads = 0, successors = 4, warmup = 0;
  double lr = 1e-3, clip = 1.0;
  bool json = false, sequence_parallel = false, activation_checkpointing = false, cuda = false, fsdp = false,
       cpu_offload = false;
  int64_t hsdp = 1;               // replicate groups of HSDP (1: plain FSDP)
  int64_t grad_accum = 1;         // micro-batches per step on each dp rank (under --pp: times --microbatches)
  int64_t memory_budget_mib = 0;  // an elastic restart's plan must fit in this per rank (0: not checked)
  std::string sample_log;         // each dp rank's rows per step appended to <sample_log>.rank<N>
  std::string mixed_precision;    // "", "bf16" or "f16": FSDP's param dtype (gradients reduced in f32)
  std::string save_dir;           // checkpoints in save_dir/step-NNNNNN (model and AdamW state)
  int64_t save_every = 0;         // 0: at the end only
  int64_t keep = 2;               // complete checkpoints kept
  bool async_save = false, resume = false;
  int64_t stop_at = 0;      // > 0: end after this step, as a preempted job would (the schedule still spans --steps)
  std::string export_path;  // the model's weights as safetensors at the end
  std::string export_hf;    // the model as a Hugging Face Llama folder at the end (nn::save_hf)
  int64_t pp = 1;           // pipeline stages' ranks (1: no pipeline)
  std::string pp_schedule = "1f1b";  // gpipe, 1f1b, interleaved, zb-h1
  int64_t microbatches = 0;          // per step (0: pp)
  int64_t stages_per_rank = 0;       // 0: 2 for interleaved, else 1
  bool print_schedule = false;
};

constexpr const char* kUsage =
    "usage: train_gpt [--dp D] [--tp T] [--layers 2] [--dim 128] [--heads 4] [--vocab 512] [--seq 64]\n"
    "                 [--batch 8] [--hidden 4*dim] [--steps 20] [--seed 0] [--lr 1e-3] [--warmup 0]\n"
    "                 [--clip 1.0] [--successors 4] [--threads N] [--sequence-parallel]\n"
    "                 [--activation-checkpointing] [--device cpu|cuda] [--fsdp] [--hsdp R]\n"
    "                 [--mixed-precision bf16|f16] [--cpu-offload] [--save-dir DIR] [--save-every N]\n"
    "                 [--keep 2] [--async-save] [--resume] [--stop-at N] [--export model.safetensors]\n"
    "                 [--export-hf DIR] [--pp P] [--pp-schedule gpipe|1f1b|interleaved|zb-h1]\n"
    "                 [--microbatches M] [--stages-per-rank V] [--print-schedule] [--grad-accum A]\n"
    "                 [--memory-budget MiB] [--sample-log PREFIX] [--json]\n"
    "Run under dtrun with P * D * T processes (or one process for P = D = T = 1).\n";

using dt::tools::UsageError;

Args parse(int argc, char** argv) {
  Args a;
  dt::tools::ArgReader args(argc, argv, kUsage);
  while (args.next()) {
    if (args.take("--dp", a.dp) || args.take("--tp", a.tp) || args.take("--layers", a.layers) ||
        args.take("--dim", a.dim) || args.take("--heads", a.heads) || args.take("--vocab", a.vocab) ||
        args.take("--seq", a.seq) || args.take("--batch", a.batch) || args.take("--hidden", a.hidden) ||
        args.take("--steps", a.steps) || args.take("--seed", a.seed) || args.take("--lr", a.lr) ||
        args.take("--warmup", a.warmup) || args.take("--clip", a.clip) || args.take("--successors", a.successors) ||
        args.take("--threads", a.threads) || args.take("--json", a.json) || args.take("--fsdp", a.fsdp) ||
        args.take("--cpu-offload", a.cpu_offload) || args.take("--sequence-parallel", a.sequence_parallel) ||
        args.take("--save-every", a.save_every) || args.take("--keep", a.keep) ||
        args.take("--async-save", a.async_save) || args.take("--stop-at", a.stop_at) ||
        args.take("--resume", a.resume) || args.take("--save-dir", a.save_dir) ||
        args.take("--export", a.export_path) || args.take("--export-hf", a.export_hf) ||
        args.take("--activation-checkpointing", a.activation_checkpointing) || args.take("--pp", a.pp) ||
        args.take("--pp-schedule", a.pp_schedule) || args.take("--microbatches", a.microbatches) ||
        args.take("--stages-per-rank", a.stages_per_rank) || args.take("--print-schedule", a.print_schedule) ||
        args.take("--grad-accum", a.grad_accum) || args.take("--memory-budget", a.memory_budget_mib) ||
        args.take("--sample-log", a.sample_log))
      continue;
    if (args.take("--hsdp", a.hsdp)) {
      a.fsdp = true;
    } else if (args.is("--mixed-precision")) {
      a.mixed_precision = args.value();
      if (a.mixed_precision != "bf16" && a.mixed_precision != "f16")
        throw UsageError{"--mixed-precision: bf16 or f16, not " + a.mixed_precision};
    } else if (args.is("--device")) {
      const std::string v = args.value();
      if (v != "cpu" && v != "cuda") throw UsageError{"--device: cpu or cuda, not " + v};
      a.cuda = v == "cuda";
    } else {
      throw args.unexpected();
    }
  }
  if (a.dp < 1 || a.tp < 1 || a.steps < 0 || a.batch < 1 || a.seq < 2 || a.vocab < 2 || a.successors < 1 ||
      a.successors > a.vocab)
    throw UsageError{"sizes must be positive (seq >= 2, 1 <= successors <= vocab)"};
  if (a.hsdp < 1 || a.dp % a.hsdp != 0) throw UsageError{"--hsdp R: R must divide --dp"};
  if (!a.mixed_precision.empty() && !a.fsdp) throw UsageError{"--mixed-precision is FSDP's: add --fsdp"};
  if (a.cpu_offload && (!a.fsdp || !a.cuda)) throw UsageError{"--cpu-offload is FSDP's, for --device cuda: add --fsdp"};
  if (a.save_dir.empty() && (a.save_every > 0 || a.resume || a.async_save))
    throw UsageError{"--save-every, --resume and --async-save need --save-dir"};
  if (a.save_every < 0 || a.keep < 1 || a.stop_at < 0)
    throw UsageError{"--save-every, --stop-at must be >= 0 and --keep >= 1"};
  if (a.grad_accum < 1 || a.memory_budget_mib < 0)
    throw UsageError{"--grad-accum must be >= 1 and --memory-budget >= 0"};
  if (a.pp < 1 || a.microbatches < 0 || a.stages_per_rank < 0)
    throw UsageError{"--pp must be >= 1, --microbatches and --stages-per-rank >= 0"};
  if (a.microbatches == 0) a.microbatches = a.pp;
  if (a.stages_per_rank == 0) a.stages_per_rank = a.pp_schedule == "interleaved" ? 2 : 1;
  if (a.pp > 1 && (a.hsdp > 1 || !a.export_hf.empty()))
    throw UsageError{"--pp does not take --hsdp or --export-hf yet"};
  if (a.pp > 1 && a.grad_accum > 1) throw UsageError{"--pp accumulates over --microbatches: no --grad-accum"};
  if (a.pp > 1 && a.batch < a.microbatches * a.dp)
    throw UsageError{"--pp: every dp rank needs a row in every microbatch: --batch >= --microbatches * --dp"};
  return a;
}

// The Markov source: successors[a * K + j] are the K distinct next tokens of a.
class Corpus {
 public:
  Corpus(int64_t vocab, int64_t k, uint64_t seed) : vocab_(vocab), k_(k), seed_(seed), next_(size_t(vocab * k)) {
    for (int64_t a = 0; a < vocab; ++a)
      for (int64_t j = 0; j < k; ++j) {
        uint64_t h = dt::splitmix64(seed ^ (uint64_t(a) << 20) ^ uint64_t(j));
        int64_t t;
        do {  // distinct successors, so every step has exactly ln(k) nats of entropy
          t = int64_t(h % uint64_t(vocab));
          h = dt::splitmix64(h);
        } while (std::find(next_.begin() + a * k, next_.begin() + a * k + j, t) != next_.begin() + a * k + j);
        next_[size_t(a * k + j)] = t;
      }
  }
  double entropy_floor() const { return std::log(double(k_)); }
  // Row `row` of the global batch of `step`: seq + 1 tokens.
  void sequence(int64_t step, int64_t row, int64_t len, int64_t* out) const {
    uint64_t h = dt::splitmix64(seed_ * 1000003u + uint64_t(step) * 65537u + uint64_t(row) + 1);
    int64_t t = int64_t(h % uint64_t(vocab_));
    for (int64_t i = 0; i < len; ++i) {
      out[i] = t;
      h = dt::splitmix64(h);
      t = next_[size_t(t * k_ + int64_t(h % uint64_t(k_)))];
    }
  }

 private:
  int64_t vocab_, k_;
  uint64_t seed_;
  std::vector<int64_t> next_;
};

// Every rank's memory by kind (and, under FSDP, against its theory: Note [FSDP memory theory]), printed by rank 0.
void print_memory(const dt::CommunicatorPtr& world, const dt::Device& device, const dt::nn::Module& model, bool fsdp,
                  bool lead, bool json) {
  const dt::MemoryUsage u = dt::memory_usage(device);
  const int64_t theory = fsdp ? dt::fsdp::memory_report(model).theory() : 0;
  using K = dt::MemoryKind;
  const std::vector<int64_t> mine{u.total_peak,
                                  u.current_of(K::kParameters),
                                  u.peak_of(K::kUnshardedParameters),
                                  u.peak_of(K::kGradients),
                                  u.current_of(K::kOptimizerState),
                                  u.peak_of(K::kCommBuffers),
                                  u.peak_of(K::kActivations),
                                  theory};
  const int64_t n = int64_t(mine.size());
  dt::Tensor all = dt::Tensor::empty({world->size() * n}, dt::DType::i64);
  dt::Tensor in = dt::Tensor::from_data(mine, {n});
  world->all_gather(in, all)->wait();
  if (!lead) return;
  if (json) {
    const char* keys[] = {"peak_bytes",      "params_bytes",    "gathered_peak_bytes",    "grads_peak_bytes",
                          "optimizer_bytes", "comm_peak_bytes", "activations_peak_bytes", "theory_bytes"};
    std::printf("{\"memory\":[");
    for (int r = 0; r < world->size(); ++r) {
      std::printf("%s{\"rank\":%d", r ? "," : "", r);
      for (int64_t i = 0; i < n; ++i) std::printf(",\"%s\":%lld", keys[i], (long long)all.data<int64_t>()[r * n + i]);
      std::printf("}");
    }
    std::printf("]}\n");
    return;
  }
  std::printf(
      "memory per rank (MiB; peaks except parameters and optimizer state, which are current):\n"
      "rank    peak   params  gathered   grads  optimizer    comm  activations%s\n",
      fsdp ? "  peak/theory" : "");
  const int64_t* v = all.data<int64_t>();
  for (int r = 0; r < world->size(); ++r, v += n) {
    auto m = [&](int i) { return double(v[i]) / (1024.0 * 1024.0); };
    std::printf("%4d  %6.1f  %7.1f  %8.1f  %6.1f  %9.1f  %6.1f  %11.1f", r, m(0), m(1), m(2), m(3), m(4), m(5), m(6));
    if (fsdp) std::printf("  %11.2f", v[7] > 0 ? double(v[0]) / double(v[7]) : 0.0);
    std::printf("\n");
  }
}

}  // namespace

// The model the flags describe.
dt::nn::GptConfig gpt_config(const Args& a) {
  dt::nn::GptConfig cfg;
  cfg.vocab = a.vocab;
  cfg.dim = a.dim;
  cfg.layers = a.layers;
  cfg.heads = a.heads;
  cfg.hidden = a.hidden;
  return cfg;
}

// Note [Resize policy]: `a` moved to `world` ranks: dp (and HSDP's replicas) from the world, tp and pp kept, the
// global batch kept by gradient accumulation (under --pp, more microbatches). The memory check, with
// --memory-budget, counts f32 parameters, gradients and AdamW's two moments, and an estimate of a row's activations
// (16 values of dim per token and layer, the logits twice).
dt::train::ParallelPlan resize(Args& a, int64_t world) {
  const dt::train::ParallelPlan asked{
      .dp = a.dp, .tp = a.tp, .pp = a.pp, .hsdp = a.hsdp, .grad_accum = a.grad_accum, .global_batch = a.batch};
  const int64_t params = dt::nn::Gpt(gpt_config(a)).declared_numel();
  const dt::train::MemoryModel memory{
      .budget_bytes = a.memory_budget_mib << 20,
      .state_bytes = params * 16,
      .state_sharded = a.fsdp,
      .activation_bytes_per_row = a.seq * (16 * a.dim * a.layers / a.pp + 2 * a.vocab) * 4 / a.tp};
  const dt::train::ParallelPlan p = dt::train::resize_plan(asked, world, memory);
  a.dp = p.dp;
  a.hsdp = p.hsdp;
  if (a.pp > 1) {
    a.microbatches *= p.grad_accum / a.grad_accum;
  } else {
    a.grad_accum = p.grad_accum;
  }
  return p;
}

int main(int argc, char** argv) {
  Args a = dt::tools::parse_or_exit("train_gpt", [&] { return parse(argc, argv); });
  try {
    // Under a launcher: its processes; started directly: a world of this one process; this rank's threads.
    const dt::examples::ProgramWorld program = dt::examples::join_world(a.threads);
    const dt::CommunicatorPtr& world = program.world;
    const bool launched = program.launched;
    const bool lead = world->rank() == 0;
    // An elastic job (dtrun --max-restarts) takes the layout of the ranks it finds: the flags are the plan asked
    // for (Note [Resize policy]); any other job must have the ranks its flags ask for.
    std::optional<dt::train::ParallelPlan> resized;
    if (program.max_restarts > 0) {
      resized = resize(a, world->size());
    } else if (!dt::examples::check_ranks(*world, a.dp, a.tp, "train_gpt", a.pp)) {
      return 2;
    }
    if (a.pp > 1 && a.batch < a.microbatches * a.dp)
      throw dt::InvalidArgument("--pp: every dp rank needs a row in every microbatch: --batch " +
                                std::to_string(a.batch) + " < " + std::to_string(a.microbatches) +
                                " microbatches x dp " + std::to_string(a.dp));
    // The FSDP engine's communication figures, printed at the end.
    dt::fsdp::CommStatsObserver comm;
    const dt::fsdp::ScopedCommObserver observing(comm);

    // --device cuda: this rank's GPU (several ranks may share one: the world's backend moves the data).
    // HSDP splits dp into (replicate, shard); the batch is split over all of dp either way.
    const dt::DeviceType type = a.cuda ? dt::DeviceType::kCUDA : dt::DeviceType::kCPU;
    const std::vector<std::string> dp_dims =
        a.hsdp > 1 ? std::vector<std::string>{"dp_replicate", "dp_shard"} : std::vector<std::string>{"dp"};
    const bool pipelined = a.pp > 1;
    dt::DeviceMesh mesh =
        pipelined    ? dt::DeviceMesh::create(type, {a.pp, a.dp, a.tp}, {"pp", "dp", "tp"})
        : a.hsdp > 1 ? dt::DeviceMesh::create(type, {a.hsdp, a.dp / a.hsdp, a.tp}, {"dp_replicate", "dp_shard", "tp"})
                     : dt::DeviceMesh::create(type, {a.dp, a.tp}, {"dp", "tp"});
    dt::DeviceMesh tp = mesh["tp"], dp = a.hsdp > 1 ? mesh.flatten(dp_dims, "dp") : mesh["dp"];
    // FSDP's mesh: the (dp, tp) mesh; under a pipeline, this rank's stage's (dp, tp) sub-mesh.
    const dt::DeviceMesh fsdp_mesh = pipelined ? mesh[{"dp", "tp"}] : mesh;
    const int64_t rss_base = dt::process_rss_bytes();
    const dt::nn::GptConfig cfg = gpt_config(a);
    auto model = std::make_shared<dt::nn::Gpt>(cfg);
    if (a.tp > 1) dt::nn::parallelize_module(model, tp, dt::nn::gpt_tp_plan(cfg, a.sequence_parallel));
    if (a.activation_checkpointing)
      for (auto& block : model->layers) block->set_activation_checkpointing(true);
    // The modules this rank trains: the model, or under a pipeline this rank's stages of it (the same parameter
    // names, and the same initial values: parameters are seeded by name).
    std::vector<dt::pipeline::StageModule> stages;
    std::optional<dt::pipeline::Schedule> pipeline_schedule;
    const int pp_rank = pipelined ? int(mesh.local_rank("pp")) : 0;
    if (pipelined) {
      pipeline_schedule = dt::pipeline::by_name(a.pp_schedule, int(a.pp), int(a.microbatches), int(a.stages_per_rank));
      for (int s = 0; s < pipeline_schedule->num_stages; ++s)
        if (pipeline_schedule->stage_rank[size_t(s)] == pp_rank)
          stages.push_back({s, dt::pipeline::gpt_stage(model, s, pipeline_schedule->num_stages)});
    } else {
      stages.push_back({0, model});
    }
    // This rank's part of the model under the model's names: checkpoints and exports hold the whole model's names,
    // so any split of it loads them (Note [Pipeline checkpoints]).
    std::vector<int> stage_ids;
    for (const dt::pipeline::StageModule& st : stages) stage_ids.push_back(st.stage);
    const dt::nn::ModulePtr rank_module =
        pipelined ? dt::pipeline::gpt_rank_module(model, stage_ids, pipeline_schedule->num_stages) : model;
    std::map<int, dt::fsdp::FsdpModule> sharded;  // stage -> its FSDP root
    std::vector<dt::nn::Variable> params;
    for (const dt::pipeline::StageModule& st : stages) {
      st.module->materialize(tp, uint64_t(a.seed));
      if (a.fsdp) {
        // Blocks first, then the root (embeddings, final norm, head). Gradients are summed (the loss below is
        // already a share of the global mean).
        dt::fsdp::FsdpOptions o{.mesh_dims = dp_dims, .gradient_divide_factor = 1.0};
        o.offload_policy.cpu_offload = a.cpu_offload;
        if (!a.mixed_precision.empty()) {
          o.mp_policy.param_dtype = a.mixed_precision == "bf16" ? dt::DType::bf16 : dt::DType::f16;
          o.mp_policy.reduce_dtype = dt::DType::f32;
        }
        // Within a pipeline step, keep the gathered parameters from forward to backward (microbatches interleave).
        if (pipelined) o.reshard_after_forward = false;
        const int num_stages = pipelined ? pipeline_schedule->num_stages : 1;
        const dt::IndexRange blocks = dt::pipeline::stage_layers(int64_t(model->layers.size()), num_stages, st.stage);
        for (int64_t i = blocks.begin; i < blocks.end; ++i)
          dt::fsdp::fully_shard(model->layers[size_t(i)], fsdp_mesh, o);
        o.mp_policy.output_dtype = dt::DType::f32;  // the loss (and a pipeline's boundary tensors) in f32
        sharded.emplace(st.stage, dt::fsdp::fully_shard(st.module, fsdp_mesh, o));
      }
      for (const dt::nn::Variable& p : st.module->parameters()) params.push_back(p);
    }
    dt::nn::AdamW opt(params, {.lr = a.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
    const dt::train::LrSchedule schedule{.kind = dt::train::LrSchedule::Kind::kWarmupCosine,
                                         .base_lr = a.lr,
                                         .warmup_steps = a.warmup,
                                         .total_steps = std::max<int64_t>(a.steps, 1),
                                         .min_lr = a.lr * 0.1,
                                         .decay_steps = 0};
    const Corpus corpus(a.vocab, a.successors, uint64_t(a.seed) + 17);

    // This dp rank's rows of the global batch (torch.chunk's split: uneven batches are fine).
    const int64_t dp_rank = dp.local_rank(0);
    const dt::IndexRange my_rows = dt::chunk_range(a.batch, a.dp, dp_rank);
    const int64_t row0 = my_rows.begin, rows = my_rows.size();
    const double tokens_per_step = double(a.batch * a.seq);
    // The loss of a dp rank's rows (or a microbatch of them) as a share of the global mean: sum / (global tokens),
    // so the dp sum of the gradients is the gradient of the global mean for any split of the batch.
    const auto token_loss = [&](const dt::nn::Variable& logits, const dt::DTensor& targets) {
      return dt::nn::div(dt::nn::cross_entropy(logits, targets, -100, dt::LossReduction::kSum), tokens_per_step);
    };
    std::optional<dt::pipeline::PipelineRunner> runner;
    if (pipelined)
      runner.emplace(dt::pipeline::RunnerOptions{
          .schedule = *pipeline_schedule,
          .pp_rank = pp_rank,
          .pp_comm = mesh.comm("pp"),
          .stage_mesh = tp,
          .stages = stages,
          .boundary_shape =
              [&](int, int mb) {
                return dt::Shape{dt::balanced_range(rows, a.microbatches, mb).size(), a.seq, a.dim};
              },
          // Under sequence parallelism the blocks' activations are sequence-sharded: so are the boundary tensors.
          .boundary_placements =
              a.sequence_parallel ? std::vector<dt::Placement>{dt::Shard{1}} : std::vector<dt::Placement>{},
          .before_backward =
              [&](int stage, bool last) {
                if (a.fsdp) sharded.at(stage).set_requires_gradient_sync(last);
              }});
    if (lead && !a.json) {
      std::printf("train_gpt: %lld layers, dim %lld, %lld heads, vocab %lld, seq %lld, batch %lld; %lld parameters\n",
                  (long long)a.layers, (long long)a.dim, (long long)a.heads, (long long)a.vocab, (long long)a.seq,
                  (long long)a.batch, (long long)model->num_parameters());
      std::printf("mesh (dp %lld, tp %lld)%s%s; corpus: %lld successors per token, entropy floor %.4f nats\n",
                  (long long)a.dp, (long long)a.tp, a.sequence_parallel ? " with sequence parallelism" : "",
                  !a.fsdp      ? ""
                  : a.hsdp > 1 ? (", HSDP (" + std::to_string(a.hsdp) + " replicas)").c_str()
                               : ", FSDP",
                  (long long)a.successors, corpus.entropy_floor());
    }
    if (lead && pipelined) {  // on stderr under --json, whose stdout is JSON lines
      FILE* out = a.json ? stderr : stdout;
      const dt::pipeline::SimulationResult sim = dt::pipeline::simulate(*pipeline_schedule);
      std::fprintf(out,
                   "pipeline: %s over pp %lld, %lld stages (%lld a rank), %lld microbatches a step; bubble in theory "
                   "%.1f%% (equal stage costs, backward twice forward)\n",
                   a.pp_schedule.c_str(), (long long)a.pp, (long long)pipeline_schedule->num_stages,
                   (long long)a.stages_per_rank, (long long)a.microbatches, 100 * sim.bubble_share);
      if (a.print_schedule) std::fprintf(out, "%s", dt::pipeline::format_schedule(*pipeline_schedule).c_str());
      std::fflush(out);
    }
    // What a restart did, on stderr under --json (whose stdout is JSON lines).
    FILE* notes = a.json ? stderr : stdout;
    if (lead && resized)
      std::fprintf(notes, "elastic: generation %d on %d ranks: %s\n", program.restart_count, world->size(),
                   dt::train::describe(*resized).c_str());
    // --resume, or a restarted generation of an elastic job: the newest complete checkpoint under --save-dir (the
    // data of step k depends on k alone, so the run goes on as if it had not stopped). A save a failure cut short
    // is never loaded, and is removed before this generation saves.
    int64_t first_step = 1;
    const bool restarted = program.restart_count > 0;
    if (restarted && a.save_dir.empty() && lead)
      std::fprintf(stderr, "train_gpt: a restarted generation without --save-dir starts again at step 1\n");
    if ((a.resume || restarted) && !a.save_dir.empty()) {
      if (lead)
        for (const std::string& d : dt::checkpoint::remove_interrupted(a.save_dir))
          std::fprintf(notes, "removed %s: a save that did not complete\n", d.c_str());
      if (const auto dir = dt::checkpoint::latest(a.save_dir)) {
        const auto t0 = std::chrono::steady_clock::now();
        const dt::checkpoint::LoadResult r = pipelined ? dt::pipeline::load_checkpoint(*dir, *rank_module, &opt)
                                                       : dt::nn::load_checkpoint(*dir, *model, &opt);
        first_step = std::get<int64_t>(r.metadata.at("step")) + 1;
        if (lead)
          std::fprintf(notes, "resumed from %s (step %lld): read %s on this rank in %.3f s\n", dir->c_str(),
                       (long long)(first_step - 1), dt::format_mib(double(r.bytes_read)).c_str(),
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      } else if (lead && !a.json) {
        std::printf("no checkpoint under %s yet: starting at step 1\n", a.save_dir.c_str());
      }
    }
    dt::checkpoint::SaveHandle pending_save;
    std::string pending_dir;
    // A save's end: wait for it (async), then keep the newest --keep checkpoints.
    auto finish_save = [&]() {
      if (!pending_save.valid()) return;
      pending_save.wait();
      pending_save = {};
      if (lead) dt::checkpoint::prune(a.save_dir, a.keep);
    };
    auto save = [&](int64_t step) {
      finish_save();
      char name[32];
      std::snprintf(name, sizeof name, "step-%06lld", (long long)step);
      pending_dir = a.save_dir + "/" + name;
      const auto t0 = std::chrono::steady_clock::now();
      pending_save = pipelined
                         ? dt::pipeline::save_checkpoint_async(pending_dir, *rank_module, &opt, {{"step", step}}, world)
                         : dt::nn::save_checkpoint_async(pending_dir, *model, &opt, {{"step", step}});
      const double blocked = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!a.async_save) finish_save();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (lead && !a.json)
        std::printf("checkpoint: step %lld %s %s in %.3f s%s\n", (long long)step,
                    a.async_save ? "saving to" : "saved to", pending_dir.c_str(), a.async_save ? blocked : secs,
                    a.async_save ? " (the rest is written while training goes on)" : "");
    };
    // --sample-log: one file per dp rank (its tp and pp rank 0), appended to by every generation.
    FILE* sample_log = nullptr;
    if (!a.sample_log.empty() && tp.local_rank(0) == 0 && (!pipelined || pp_rank == 0)) {
      const std::string path = a.sample_log + ".dp" + std::to_string(dp_rank);
      sample_log = std::fopen(path.c_str(), "a");
      if (sample_log == nullptr) throw dt::InvalidArgument("--sample-log: cannot append to " + path);
    }
    double first_loss = 0, last_loss = 0, total_s = 0;
    double pp_step_s = 0, pp_compute_s = 0;  // the pipeline's steps after the first: its measured bubble
    const int64_t last_step = a.stop_at > 0 ? std::min(a.stop_at, a.steps) : a.steps;
    for (int64_t step = first_step; step <= last_step; ++step) {
      dt::trace::StepSpan step_span(step);  // DT_TRACE: the step in the timeline
      const auto t0 = std::chrono::steady_clock::now();
      dt::Tensor tokens = dt::Tensor::empty({rows, a.seq + 1}, dt::DType::i64);
      for (int64_t r = 0; r < rows; ++r)
        corpus.sequence(step, row0 + r, a.seq + 1, tokens.data<int64_t>() + r * (a.seq + 1));
      dt::Tensor ids = tokens.narrow(1, 0, a.seq).contiguous(), targets = tokens.narrow(1, 1, a.seq).contiguous();
      opt.set_lr(schedule.lr_at(step - 1));
      dt::Tensor l;
      if (pipelined) {  // this dp rank's rows in microbatches, as even as possible
        std::vector<dt::DTensor> in, tgt;
        for (int64_t mb = 0; mb < a.microbatches; ++mb) {
          const dt::IndexRange r = dt::balanced_range(rows, a.microbatches, mb);
          in.push_back(dt::as_replicate(ids.narrow(0, r.begin, r.size()).contiguous(), tp));
          tgt.push_back(dt::as_replicate(targets.narrow(0, r.begin, r.size()).contiguous(), tp));
        }
        l = dt::Tensor::from_vector({runner->step(in, tgt, token_loss)}, {1}, dt::DType::f64);
        if (step > first_step) {
          pp_step_s += runner->last_step_times().step_s;
          pp_compute_s += runner->last_step_times().compute_s;
        }
      } else {  // grad_accum micro-batches of this dp rank's rows; FSDP reduces after the last only
        double sum = 0;
        for (int64_t m = 0; m < a.grad_accum; ++m) {
          const dt::IndexRange r = dt::balanced_range(rows, a.grad_accum, m);
          if (a.fsdp && a.grad_accum > 1) sharded.at(0).set_requires_gradient_sync(m == a.grad_accum - 1);
          const dt::Tensor mi = ids.narrow(0, r.begin, r.size()).contiguous();
          const dt::Tensor mt = targets.narrow(0, r.begin, r.size()).contiguous();
          dt::nn::Variable loss =
              token_loss((*model)(dt::nn::Variable(dt::as_replicate(mi, tp))), dt::as_replicate(mt, tp));
          loss.backward();
          sum += loss.full_tensor().to(dt::DType::f64).data<double>()[0];
        }
        l = dt::Tensor::from_vector({sum}, {1}, dt::DType::f64);
      }
      if (sample_log) {  // the rows this dp rank trained, for the elastic trials' check
        std::fprintf(sample_log, "gen %d step %lld rows %lld %lld dp %lld\n", program.restart_count, (long long)step,
                     (long long)row0, (long long)rows, (long long)a.dp);
        std::fflush(sample_log);
      }
      if (a.dp > 1 && !a.fsdp) dt::nn::all_reduce_gradients(params, dp, dt::ReduceOp::kSum);
      if (a.clip > 0) {
        if (pipelined)
          dt::pipeline::clip_grad_norm_(params, a.clip, mesh.comm("pp"));
        else
          dt::nn::clip_grad_norm_(params, a.clip);
      }
      opt.step();
      opt.zero_grad();
      if (a.dp > 1) dp.comm(0)->all_reduce(l, dt::ReduceOp::kSum)->wait();
      const double value = l.data<double>()[0];
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      total_s += secs;
      if (step == first_step) first_loss = value;
      last_loss = value;
      // The accounting's peak (core/memory_stats.h): every storage this rank holds, by kind.
      const double peak = double(dt::memory_usage(mesh.device()).total_peak);
      if (lead) {
        if (a.json)  // %.17g round-trips the double: runs can be compared bit for bit
          std::printf(
              "{\"step\":%lld,\"loss\":%.17g,\"step_s\":%.6f,\"tokens_per_s\":%.1f,\"peak_bytes\":%.0f,"
              "\"rss_base_bytes\":%lld,\"rss_peak_bytes\":%lld}\n",
              (long long)step, value, secs, tokens_per_step / secs, peak, (long long)rss_base,
              (long long)dt::process_peak_rss_bytes());
        else
          std::printf("step %4lld  loss %.5f  %9.0f tokens/s  lr %.2e  peak %s per rank\n", (long long)step, value,
                      tokens_per_step / secs, opt.lr(), dt::format_mib(peak).c_str());
        std::fflush(stdout);
      }
      if (!a.save_dir.empty() && ((a.save_every > 0 && step % a.save_every == 0) || step == last_step)) save(step);
    }
    finish_save();
    if (!a.export_path.empty()) {
      dt::checkpoint::export_safetensors(
          a.export_path,
          pipelined ? dt::pipeline::complete_tensor_list(rank_module->state_dict(), world) : model->state_dict());
      if (lead && !a.json) std::printf("exported the model's weights to %s\n", a.export_path.c_str());
    }
    if (!a.export_hf.empty()) {  // a LlamaForCausalLM: RMSNorm, SwiGLU, rotate-half RoPE (docs/models.md)
      dt::nn::HfConfig hf;
      hf.model = cfg;
      hf.max_position_embeddings = std::max<int64_t>(2048, a.seq);
      dt::nn::save_hf(a.export_hf, *model, hf);
      if (lead && !a.json) std::printf("exported the model as a Hugging Face folder to %s\n", a.export_hf.c_str());
    }
    if (lead && !a.json && last_step >= first_step)
      std::printf("done: loss %.4f -> %.4f (entropy floor %.4f), %.0f tokens/s on average\n", first_loss, last_loss,
                  corpus.entropy_floor(), tokens_per_step * double(last_step - first_step + 1) / total_s);
    if (pipelined &&
        last_step > first_step) {  // every rank's bubble: 1 - compute / step over the steps after the first
      dt::Tensor mine =
          dt::Tensor::from_vector({pp_step_s > 0 ? 1.0 - pp_compute_s / pp_step_s : 0.0}, {1}, dt::DType::f64);
      dt::Tensor all = dt::Tensor::empty({world->size()}, dt::DType::f64);
      world->all_gather(mine, all)->wait();
      if (lead) {
        std::string ranks;
        double sum = 0;
        for (int r = 0; r < world->size(); ++r) {
          const double b = all.data<double>()[r];
          sum += b;
          char one[32];
          std::snprintf(one, sizeof one, "%s%.1f%%", r ? ", " : "", 100 * b);
          ranks += one;
        }
        std::fprintf(a.json ? stderr : stdout,
                     "pipeline: measured bubble %.1f%% (per rank: %s): the share of each rank's step outside its F, "
                     "B, I and W actions, over steps %lld-%lld\n",
                     100 * sum / world->size(), ranks.c_str(), (long long)(first_step + 1), (long long)last_step);
      }
    }
    if (a.steps > 0) print_memory(world, mesh.device(), *stages.front().module, a.fsdp && !pipelined, lead, a.json);
    if (lead && a.json && a.fsdp && a.steps > 0) {
      const dt::fsdp::CommStats c = comm.stats();
      std::printf(
          "{\"comm\":{\"issued_s\":%.6f,\"exposed_s\":%.6f,\"hidden_share\":%.4f,\"all_gathers\":%lld,"
          "\"reduce_scatters\":%lld,\"all_reduces\":%lld,\"bytes\":%lld}}\n",
          c.issued_s, c.exposed_s, c.issued_s > 0 ? 1.0 - c.exposed_s / c.issued_s : 0.0, (long long)c.all_gathers,
          (long long)c.reduce_scatters, (long long)c.all_reduces, (long long)c.bytes);
    }
    if (lead && !a.json && a.fsdp && a.steps > 0) {
      const dt::fsdp::CommStats c = comm.stats();
      std::printf(
          "fsdp: %lld all-gathers, %lld reduce-scatters, %lld all-reduces, %s sent per rank; collectives in "
          "flight %.3f s, of which the step waited %.3f s: %.0f%% hidden behind compute\n",
          (long long)c.all_gathers, (long long)c.reduce_scatters, (long long)c.all_reduces,
          dt::format_mib(double(c.bytes)).c_str(), c.issued_s, c.exposed_s,
          c.issued_s > 0 ? 100.0 * (1.0 - c.exposed_s / c.issued_s) : 0.0);
    }
    if (launched) dt::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "train_gpt: " << e.what() << "\n";
    dt::record_error(std::string("train_gpt: ") + e.what());  // Note [Error files]: for the launcher
    return 1;
  }
}
