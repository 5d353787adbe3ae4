// The trainer's configuration: one TOML file with torchtitan's sections, every value overridable on the command line
// (`--training.steps 200`), validated against one table of fields (name, type, range, help), printed resolved at start
// and saved in each checkpoint.
//
//   train::TrainConfig c = train::load_config("llama.toml", {"--training.steps", "200"});
//   std::cout << train::to_toml(c);
//
// An unknown section or key, a value of the wrong type, one out of range or a bad choice is an InvalidArgument naming
// the key (and the file and line where it came from a file); `train::config_help()` lists every field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dt::train {

struct TrainConfig {
  struct Model {
    std::string hf_folder;  // a Hugging Face Llama-family folder to start from; empty: from scratch with the below
    int64_t vocab = 512, dim = 128, layers = 2, heads = 4, kv_heads = 0, hidden = 0;
    double rope_theta = 10000.0, norm_eps = 1e-5;
    bool tie_embeddings = false;
    // From scratch: weights ~ Normal(0, init_std) truncated at +-init_cutoff std, the output projections of block l
    // scaled by 1 / sqrt(2 (l + 1)) (depth, torchtitan's depth_init) or 1 / sqrt(2 layers) (layers, GPT-2's)
    // (nn::GptInit).
    double init_std = 0.02, init_cutoff = 2.0;
    std::string init_depth = "depth";  // none, depth, layers
  } model;
  struct Parallelism {
    int64_t dp = 1, tp = 1, hsdp = 1;  // hsdp > 1: dp = hsdp replicas x (dp / hsdp) shards
    bool fsdp = true;
  } parallelism;
  struct Training {
    int64_t steps = 100, seq = 128, global_batch = 8, grad_accum = 1, seed = 0, threads = 0;
    double max_norm = 1.0;                 // gradient clipping; 0: off
    int64_t activation_checkpointing = 0;  // 0: off; k: every k-th block (1: every block)
  } training;
  struct Optimizer {
    double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
    bool decay_norms = false, decay_biases = false, decay_embeddings = false;
  } optimizer;
  struct LrScheduleSection {
    std::string kind = "cosine";  // constant, cosine, linear, wsd
    int64_t warmup = 0, decay_steps = 0;
    double min_lr = 0.0;
  } lr_schedule;
  struct Data {
    std::string path;  // a token dataset (train/token_dataset.h)
    double validation_fraction = 0.05;
    int64_t val_every = 50, val_batches = 2;  // 0: no validation
  } data;
  struct Checkpoint {
    std::string folder;           // checkpoints in folder/step-NNNNNN; empty: none
    int64_t every = 0, keep = 2;  // every 0: at the end (and on SIGTERM) only
    bool async = true, resume = true;
    std::string export_hf;  // the trained model as a Hugging Face folder at the end; empty: none
  } checkpoint;
  struct MixedPrecision {
    std::string param_dtype = "f32";  // f32, bf16, f16 (the FSDP compute dtype; master weights stay f32)
    std::string reduce_dtype = "f32";
    double init_scale = 65536.0;  // f16's dynamic loss scale
    int64_t growth_interval = 2000;
  } mixed_precision;
  struct Logging {
    std::string log_file;  // a JSON line per step and per validation; empty: none
    int64_t every = 1;
    double peak_flops = 0;  // for the MFU estimate; 0: measured (the BLAS peak of this machine)
  } logging;
};

// Parses `toml_text` (from `source`, for messages) over the defaults, then applies `overrides` (pairs
// "--section.key" "value", or "--section.key=value"), then validates.
TrainConfig parse_config(const std::string& toml_text, const std::vector<std::string>& overrides = {},
                         const std::string& source = "<config>");
// The same from a file (empty path: the defaults and the overrides only).
TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Every field, resolved, as TOML (sections in order): what the trainer prints and saves.
std::string to_toml(const TrainConfig& config);
// One line per field: "section.key  type  default  help".
std::string config_help();

}  // namespace dt::train
