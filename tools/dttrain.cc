// dttrain: the trainer. A Llama-family model (from scratch, or a Hugging Face folder) trained on a token dataset on any
// (dp, tp) mesh, FSDP or not, from one TOML config (train/config.h) whose every value the command line overrides.
// Built on the public C++ API only (<dtensor/dt.h>), like a user's own trainer.
//
//   dttrain train.toml                                    # one process
//   dtrun --nproc-per-node 4 dttrain train.toml --parallelism.dp 2 --parallelism.tp 2
//   dttrain --help-config                                 # every field, its default and meaning
//   dttrain plot train.jsonl [--out train.png]            # loss, lr and tokens/s against step (matplotlib)
//
// Each step: grad_accum micro-batches of this dp rank's rows (FSDP reduces after the last only), the loss scaled so
// that any (dp, grad_accum) split of the global batch gives the same update, the f16 loss scaler (skipping steps with
// a non-finite gradient on any rank), clipping, AdamW over parameter groups, the lr of the schedule. A line per step:
// loss, grad norm, lr, tokens/s, MFU, memory per rank; a JSON log; validation every N steps; checkpoints (with the
// resolved config, the data position and the scaler) and resume, at any world size; SIGTERM saves and stops.
#include <dtensor/dt.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tools/progress.h"

namespace {

constexpr const char* kUsage =
    "usage: dttrain CONFIG.toml [--section.key VALUE ...]   (under dtrun for several processes)\n"
    "       dttrain --help-config                           every config field, its default and meaning\n"
    "       dttrain plot LOG.jsonl [--out PLOT.png]         loss, lr and tokens/s against step\n";

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// This rank's FLOP/s on a 1024^3 f32 GEMM, best of 3: the peak MFU is measured against on the CPU.
double measured_peak_flops() {
  const int64_t n = 1024;
  const dt::Tensor a = dt::Tensor::randn({n, n}, 1), b = dt::Tensor::randn({n, n}, 2);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    (void)dt::kernels::matmul(a, b);
    best = std::min(best, since(t0));
  }
  return 2.0 * double(n * n * n) / best;
}

// Values summed (or maxed) over the world in one all-reduce, on every rank.
std::vector<double> world_reduce(const dt::CommunicatorPtr& world, std::vector<double> v, dt::ReduceOp op) {
  dt::Tensor t = dt::Tensor::from_data(v, {int64_t(v.size())});
  world->all_reduce(t, op)->wait();
  return {t.data<double>(), t.data<double>() + t.numel()};
}
double world_reduce(const dt::CommunicatorPtr& world, double v, dt::ReduceOp op) {
  return world_reduce(world, std::vector<double>{v}, op)[0];
}

struct Run {
  dt::train::TrainConfig c;
  dt::CommunicatorPtr world;
  bool lead = false;
  dt::DeviceMesh mesh, tp, dp;
  int64_t dp_rank = 0;
  std::shared_ptr<dt::nn::Gpt> model;
  std::optional<dt::fsdp::FsdpModule> root;
  dt::nn::HfConfig hf;
  std::vector<dt::nn::Variable> params;
  std::unique_ptr<dt::nn::AdamW> opt;
  std::unique_ptr<dt::train::TokenLoader> loader;
  std::unique_ptr<dt::train::LossScaler> scaler;
  std::ofstream log;
};

void build_model(Run& r) {
  const auto& m = r.c.model;
  dt::nn::GptConfig g;
  if (!m.hf_folder.empty()) {
    r.hf = dt::nn::read_hf_config(m.hf_folder);
    g = r.hf.model;
  } else {
    g.vocab = m.vocab;
    g.dim = m.dim;
    g.layers = m.layers;
    g.heads = m.heads;
    g.kv_heads = m.kv_heads;
    g.hidden = m.hidden;
    g.rope_theta = m.rope_theta;
    g.norm_eps = m.norm_eps;
    g.tie_embeddings = m.tie_embeddings;
    g.init = {.std = m.init_std,
              .cutoff = m.init_cutoff,
              .depth = m.init_depth == "depth"    ? dt::nn::DepthScaling::kDepth
                       : m.init_depth == "layers" ? dt::nn::DepthScaling::kLayers
                                                  : dt::nn::DepthScaling::kNone};
    r.hf.model = g;
    r.hf.max_position_embeddings = std::max<int64_t>(2048, r.c.training.seq);
  }
  r.model = std::make_shared<dt::nn::Gpt>(g);
  const int64_t tp = r.c.parallelism.tp;
  if (tp > 1) dt::nn::parallelize_module(r.model, r.tp, dt::nn::gpt_tp_plan(g, false, tp));
  const int64_t k = r.c.training.activation_checkpointing;
  for (size_t i = 0; k > 0 && i < r.model->layers.size(); ++i)
    if (int64_t(i) % k == k - 1) r.model->layers[i]->set_activation_checkpointing(true);
  if (m.hf_folder.empty())
    r.model->materialize(r.tp, uint64_t(r.c.training.seed));
  else
    r.model->materialize_empty(r.tp);
  if (r.c.parallelism.fsdp) {
    dt::fsdp::FsdpOptions o;
    o.mesh_dims = r.c.parallelism.hsdp > 1 ? std::vector<std::string>{"dp_replicate", "dp_shard"}
                                           : std::vector<std::string>{"dp"};
    o.gradient_divide_factor = 1.0;  // the loss is already each rank's share of the global mean
    const std::string& pd = r.c.mixed_precision.param_dtype;
    if (pd != "f32") {
      o.mp_policy.param_dtype = dt::dtype_from_name(pd);
      o.mp_policy.reduce_dtype = dt::dtype_from_name(r.c.mixed_precision.reduce_dtype);
    }
    for (auto& block : r.model->layers) dt::fsdp::fully_shard(block, r.mesh, o);
    o.mp_policy.output_dtype = dt::DType::f32;  // logits and loss in f32
    r.root = dt::fsdp::fully_shard(r.model, r.mesh, o);
  }
  if (!m.hf_folder.empty()) dt::nn::load_hf_weights(m.hf_folder, *r.model);
  r.params = r.model->parameters();
}

void save(Run& r, int64_t step, dt::checkpoint::SaveHandle& pending) {
  if (r.c.checkpoint.folder.empty()) return;
  if (pending.valid()) pending.wait();
  char name[32];
  std::snprintf(name, sizeof name, "step-%06lld", (long long)step);
  dt::checkpoint::Metadata meta{{"step", step}, {"config", dt::train::to_toml(r.c)}};
  if (r.scaler) {
    meta["scaler.scale"] = r.scaler->current_scale();
    meta["scaler.growth_tracker"] = r.scaler->growth_tracker();
  }
  const std::string dir = r.c.checkpoint.folder + "/" + name;
  pending = dt::nn::save_checkpoint_async(dir, *r.model, r.opt.get(), meta);
  if (!r.c.checkpoint.async) {
    pending.wait();
    pending = {};  // waited: the next save, and the end, have nothing to wait for
  }
  if (r.lead) std::printf("checkpoint: step %lld -> %s\n", (long long)step, dir.c_str());
}

// The mean loss over val_batches validation batches of the global batch size, on every rank.
double validate(Run& r) {
  dt::nn::NoGradGuard no_grad;
  r.model->eval();
  const auto& t = r.c.training;
  const dt::IndexRange mine = dt::chunk_range(t.global_batch, r.c.parallelism.dp, r.dp_rank);
  double sum = 0;
  for (int64_t i = 0; i < r.c.data.val_batches; ++i) {
    const dt::Tensor rows = r.loader->validation_batch(i, mine.begin, mine.size());
    const dt::Tensor ids = rows.narrow(1, 0, t.seq).contiguous(), targets = rows.narrow(1, 1, t.seq).contiguous();
    dt::nn::Variable logits = (*r.model)(dt::nn::Variable(dt::as_replicate(ids, r.tp)));
    dt::nn::Variable loss =
        dt::nn::cross_entropy(logits, dt::as_replicate(targets, r.tp), -100, dt::LossReduction::kSum);
    sum += loss.full_tensor().to(dt::DType::f64).item();
  }
  r.model->train();
  // Every tp rank holds the same sum for its dp rank: count each dp rank once.
  const double total = world_reduce(r.world, r.tp.local_rank(0) == 0 ? sum : 0.0, dt::ReduceOp::kSum);
  return total / double(r.c.data.val_batches * t.global_batch * t.seq);
}

int train(const std::vector<std::string>& args) {
  Run r;
  r.c = dt::train::load_config(args.at(0), std::vector<std::string>(args.begin() + 1, args.end()));
  // An elastic launcher's generation (Note [Generations]); max_restarts > 0: the job may come back on other ranks.
  const dt::BootstrapEnv launch = dt::under_launcher() ? dt::init_from_env() : dt::BootstrapEnv{};
  r.world = dt::init_process_group_or_alone();  // under a launcher its world; alone, a world of this process
  r.lead = r.world->rank() == 0;
  // An elastic job takes the layout of the ranks it finds (Note [Resize policy]): the config is the plan asked for.
  std::optional<dt::train::ParallelPlan> resized;
  if (launch.max_restarts > 0) {
    auto& p = r.c.parallelism;
    auto& t = r.c.training;
    resized = dt::train::resize_plan(
        {.dp = p.dp, .tp = p.tp, .hsdp = p.hsdp, .grad_accum = t.grad_accum, .global_batch = t.global_batch},
        r.world->size());
    p.dp = resized->dp;
    p.hsdp = resized->hsdp;
    t.grad_accum = resized->grad_accum;
  }
  const auto& c = r.c;
  const int64_t dp = c.parallelism.dp, tp = c.parallelism.tp;
  DT_CHECK_ARG(r.world->size() == dp * tp, "dttrain: parallelism.dp ", dp, " x parallelism.tp ", tp, " = ", dp * tp,
               " ranks, but ", r.world->size(), " process(es) run (dtrun --nproc-per-node ", dp * tp, ")");
  if (r.lead && resized)
    std::printf("elastic: generation %d on %d ranks: %s\n", launch.restart_count, r.world->size(),
                dt::train::describe(*resized).c_str());
  const int threads = c.training.threads > 0 ? int(c.training.threads) : dt::kernels::default_intra_op_threads();
  dt::kernels::set_blas_threads(1);
  dt::kernels::set_intra_op_threads(threads);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);

  r.mesh = c.parallelism.hsdp > 1
               ? dt::DeviceMesh::create(dt::DeviceType::kCPU, {c.parallelism.hsdp, dp / c.parallelism.hsdp, tp},
                                        {"dp_replicate", "dp_shard", "tp"})
               : dt::DeviceMesh::create(dt::DeviceType::kCPU, {dp, tp}, {"dp", "tp"});
  r.tp = r.mesh["tp"];
  r.dp = c.parallelism.hsdp > 1 ? r.mesh.flatten({"dp_replicate", "dp_shard"}, "dp") : r.mesh["dp"];
  r.dp_rank = r.dp.local_rank(0);
  if (r.lead) std::printf("dttrain: resolved config\n%s\n", dt::train::to_toml(c).c_str());

  auto data = dt::train::TokenDataset::open(c.data.path);
  build_model(r);
  data->check_vocab(r.model->config.vocab);
  r.loader = std::make_unique<dt::train::TokenLoader>(
      data, dt::train::LoaderOptions{.seq = c.training.seq,
                                     .global_batch = c.training.global_batch,
                                     .seed = uint64_t(c.training.seed),
                                     .validation_fraction = c.data.val_every > 0 ? c.data.validation_fraction : 0});
  const auto& o = c.optimizer;
  r.opt = std::make_unique<dt::nn::AdamW>(
      dt::train::param_groups(*r.model, {.weight_decay = o.weight_decay,
                                         .decay_norms = o.decay_norms,
                                         .decay_biases = o.decay_biases,
                                         .decay_embeddings = o.decay_embeddings,
                                         .lr_scales = {}}),
      dt::nn::AdamWOptions{.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = 0});
  if (c.mixed_precision.param_dtype == "f16")
    r.scaler = std::make_unique<dt::train::LossScaler>(
        dt::train::LossScalerOptions{.init_scale = c.mixed_precision.init_scale,
                                     .growth_factor = 2,
                                     .backoff_factor = 0.5,
                                     .growth_interval = c.mixed_precision.growth_interval,
                                     .enabled = true});
  const dt::train::LrSchedule schedule{.kind = dt::train::LrSchedule::kind_from_name(c.lr_schedule.kind),
                                       .base_lr = o.lr,
                                       .warmup_steps = c.lr_schedule.warmup,
                                       .total_steps = std::max<int64_t>(1, c.training.steps),
                                       .min_lr = c.lr_schedule.min_lr,
                                       .decay_steps = c.lr_schedule.decay_steps};
  int64_t first = 1;
  if (!c.checkpoint.folder.empty() && c.checkpoint.resume) {
    // A save a failure (or a kill) cut short is never loaded, and is removed before this run saves.
    if (r.lead)
      for (const std::string& d : dt::checkpoint::remove_interrupted(c.checkpoint.folder))
        std::printf("removed %s: a save that did not complete\n", d.c_str());
    if (const auto dir = dt::checkpoint::latest(c.checkpoint.folder)) {
      const dt::checkpoint::LoadResult lr = dt::nn::load_checkpoint(*dir, *r.model, r.opt.get());
      first = std::get<int64_t>(lr.metadata.at("step")) + 1;
      if (r.scaler && lr.metadata.count("scaler.scale"))
        r.scaler->load_state(std::get<double>(lr.metadata.at("scaler.scale")),
                             std::get<int64_t>(lr.metadata.at("scaler.growth_tracker")));
      if (r.lead) std::printf("resumed from %s: step %lld is next\n", dir->c_str(), (long long)first);
    }
  }
  if (!c.logging.log_file.empty() && r.lead) {
    r.log.open(c.logging.log_file, std::ios::app);
    DT_CHECK_ARG(r.log.is_open(), "dttrain: cannot open the log file '", c.logging.log_file, "'");
    r.log.precision(17);  // every figure round-trips: runs compare bit for bit
  }
  const double peak = c.logging.peak_flops > 0 ? c.logging.peak_flops : measured_peak_flops();
  const double params = double(r.model->num_parameters());
  const auto& g = r.model->config;
  // PaLM's model FLOPs (torchtitan's): 6 per parameter and token, but for the embedding table, which is looked up, not
  // multiplied (tied, it is the output projection too, and counts); plus attention's scores and sums.
  const double embedding = g.tie_embeddings ? 0.0 : double(g.vocab * g.dim);
  const double flops_per_token =
      6.0 * (params - embedding) + 12.0 * double(g.layers) * double(g.heads * g.head_size()) * double(c.training.seq);
  if (r.lead)
    std::printf(
        "dttrain: %.2f M parameters, %lld tokens in %s (%lld training windows), mesh dp %lld x tp %lld%s, "
        "%d thread(s) per rank, peak %.1f GFLOP/s per rank\n",
        params / 1e6, (long long)data->size(), c.data.path.c_str(), (long long)r.loader->train_windows(), (long long)dp,
        (long long)tp, c.parallelism.fsdp ? " (FSDP)" : "", threads, peak / 1e9);

  const auto& t = c.training;
  const int64_t micro_rows = t.global_batch / t.grad_accum;
  const double tokens_per_step = double(t.global_batch * t.seq);
  dt::checkpoint::SaveHandle pending;
  int status = 0;
  int64_t step = first;
  for (; step <= t.steps; ++step) {
    dt::trace::StepSpan step_span(step);  // DT_TRACE: the step in the timeline (dttrace summary divides by it)
    const auto t0 = Clock::now();
    r.opt->set_lr(schedule.lr_at(step - 1));
    double local_loss = 0;
    for (int64_t m = 0; m < t.grad_accum; ++m) {
      const dt::IndexRange mine = dt::chunk_range(micro_rows, dp, r.dp_rank);
      const dt::Tensor rows = r.loader->batch(step - 1, m * micro_rows + mine.begin, mine.size());
      const dt::Tensor ids = rows.narrow(1, 0, t.seq).contiguous(), targets = rows.narrow(1, 1, t.seq).contiguous();
      if (r.root) r.root->set_requires_gradient_sync(m == t.grad_accum - 1);
      dt::nn::Variable logits = (*r.model)(dt::nn::Variable(dt::as_replicate(ids, r.tp)));
      // This rank's share of the mean over every token of the global batch: any split gives the same update.
      dt::nn::Variable loss =
          dt::nn::div(dt::nn::cross_entropy(logits, dt::as_replicate(targets, r.tp), -100, dt::LossReduction::kSum),
                      tokens_per_step);
      (r.scaler ? r.scaler->scale(loss) : loss).backward();
      local_loss += loss.full_tensor().to(dt::DType::f64).item();
    }
    if (dp > 1 && !c.parallelism.fsdp) dt::nn::all_reduce_gradients(r.params, r.dp, dt::ReduceOp::kSum);
    bool take = r.scaler ? r.scaler->unscale(r.params) : true;
    const double norm =
        take ? (t.max_norm > 0 ? dt::nn::clip_grad_norm_(r.params, t.max_norm) : dt::nn::grad_norm(r.params)) : NAN;
    const double loss = world_reduce(r.world, r.tp.local_rank(0) == 0 ? local_loss : 0.0, dt::ReduceOp::kSum);
    if (take && (!std::isfinite(loss) || !std::isfinite(norm))) {
      // Never trained on: name where it went wrong (the scaler's check, without scaling), save nothing, stop.
      dt::train::LossScaler probe(
          {.init_scale = 1, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 1, .enabled = false});
      probe.unscale(r.params);
      if (r.lead)
        std::fprintf(stderr,
                     "dttrain: step %lld: the loss is %g and the gradient norm %g%s; stopping without this "
                     "update (lower the lr, or use bf16 / the f16 loss scaler)\n",
                     (long long)step, loss, norm,
                     probe.found() ? (": first non-finite gradient " + *probe.found()).c_str() : "");
      status = 1;
      break;
    }
    if (take) r.opt->step();
    if (r.scaler) r.scaler->update();
    r.opt->zero_grad();
    const double secs = since(t0);
    const double tokens_per_s = tokens_per_step / secs;
    const double mfu = tokens_per_s * flops_per_token / double(r.world->size()) / peak;
    // The largest memory peak over the ranks and whether any rank got a signal: one all-reduce.
    const std::vector<double> maxima = world_reduce(
        r.world, {double(dt::memory_usage(dt::Device::cpu()).total_peak), g_stop ? 1.0 : 0.0}, dt::ReduceOp::kMax);
    const double peak_bytes = maxima[0];
    const bool stop = maxima[1] > 0;
    if (r.lead && (step % c.logging.every == 0 || step == t.steps)) {
      std::printf("step %5lld  loss %.4f  grad norm %.3f  lr %.3e  %.0f tokens/s  MFU %.1f%%  memory %.1f MiB/rank%s\n",
                  (long long)step, loss, norm, r.opt->lr(), tokens_per_s, 100 * mfu, mib(peak_bytes),
                  take ? "" : ("  (skipped: " + r.scaler->found().value_or("") + ")").c_str());
      std::fflush(stdout);
      if (r.log.is_open())
        r.log << "{\"step\":" << step << ",\"loss\":" << loss << ",\"grad_norm\":" << (take ? norm : -1)
              << ",\"lr\":" << r.opt->lr() << ",\"tokens_per_s\":" << tokens_per_s << ",\"mfu\":" << mfu
              << ",\"peak_bytes\":" << peak_bytes << ",\"skipped\":" << (take ? "false" : "true") << "}\n"
              << std::flush;
    }
    if (c.data.val_every > 0 && step % c.data.val_every == 0) {
      const double val = validate(r);
      if (r.lead) {
        std::printf("step %5lld  validation loss %.4f\n", (long long)step, val);
        if (r.log.is_open()) r.log << "{\"step\":" << step << ",\"val_loss\":" << val << "}\n" << std::flush;
      }
    }
    if (stop || (c.checkpoint.every > 0 && step % c.checkpoint.every == 0 && step < t.steps)) save(r, step, pending);
    if (stop) {
      if (r.lead) std::printf("dttrain: stopped by a signal after step %lld (checkpoint saved)\n", (long long)step);
      break;
    }
  }
  if (status == 0 && step > t.steps && t.steps >= first) save(r, t.steps, pending);
  if (pending.valid()) pending.wait();
  if (r.lead && !c.checkpoint.folder.empty()) dt::checkpoint::prune(c.checkpoint.folder, c.checkpoint.keep);
  if (status == 0 && !c.checkpoint.export_hf.empty()) {
    dt::tools::ProgressBar bar("exporting to " + c.checkpoint.export_hf + " (rank 0's blocks)");
    std::function<void(uint64_t, uint64_t)> progress;
    if (r.lead) progress = std::ref(bar);
    dt::nn::save_hf(c.checkpoint.export_hf, *r.model, r.hf,
                    {.dtype = dt::DType::f32, .max_shard_bytes = 0, .progress = progress});
    if (r.lead) std::printf("exported the model as a Hugging Face folder to %s\n", c.checkpoint.export_hf.c_str());
  }
  r.root.reset();
  r.opt.reset();
  r.model.reset();
  r.mesh = {};
  r.tp = {};
  r.dp = {};
  r.world.reset();
  dt::destroy_process_group();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--help-config") {
    std::fputs(dt::train::config_help().c_str(), stdout);
    return 0;
  }
  if (args[0] == "plot") {
    // The plot is matplotlib's: the script beside this program's sources (tools/plot_training.py).
    std::vector<std::string> cmd = {"python3", DT_PLOT_SCRIPT};
    cmd.insert(cmd.end(), args.begin() + 1, args.end());
    std::vector<char*> argvv;
    for (auto& s : cmd) argvv.push_back(s.data());
    argvv.push_back(nullptr);
    ::execvp("python3", argvv.data());
    std::perror("dttrain plot: python3");
    return 1;
  }
  try {
    return train(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dttrain: %s\n", e.what());
    dt::record_error(std::string("dttrain: ") + e.what());  // Note [Error files]: for the launcher
    dt::destroy_process_group();  // the world and the store, released now, not left to static destruction
    return 1;
  }
}
