// Hugging Face model folders for the Llama family (nn/models/gpt.h's Gpt): config.json, the weights (one
// model.safetensors, or shards named by model.safetensors.index.json), read straight into any mesh and placements
// and written back in a form transformers.AutoModelForCausalLM.from_pretrained loads unchanged.
//
//   nn::HfConfig hf = nn::read_hf_config("llama-folder");
//   auto model = std::make_shared<nn::Gpt>(hf.model);
//   nn::parallelize_module(model, mesh, nn::gpt_tp_plan(hf.model, false, mesh.size(1)));  // or fully_shard, ...
//   model->materialize_empty(mesh["tp"]);             // allocated, not filled: the folder fills it
//   nn::load_hf_weights("llama-folder", *model);       // each rank reads only the bytes of its own blocks
//   ...                                                // train
//   nn::save_hf("out-folder", *model, hf);             // config.json + safetensors (+ index when sharded)
//
// Note [Hugging Face names]
// The module names are torchtitan's (tok_embeddings, layers.{i}.attention.wq, feed_forward.w1, ...); a Hugging Face
// Llama names the same tensors model.embed_tokens, model.layers.{i}.self_attn.q_proj, mlp.gate_proj, ... One table
// (kHfNames in hf.cc) pairs the two, and both directions (import and export) read it. Tensors are otherwise stored
// as they are: both sides use the rotate-half RoPE layout (the pairs are (j, j + head_dim / 2) of each head), so no
// row of wq or wk is permuted. torchtitan's own checkpoints pair (2j, 2j + 1) instead: converting one of those means
// permuting the rows of each head of wq and wk, as Hugging Face's convert_llama_weights_to_hf.py does, before
// loading here. A tied model (tie_word_embeddings) has no lm_head.weight of its own: it is not written, and one found
// in a file (some exporters write both) is ignored, since it must equal the embedding.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/checkpoint/checkpoint.h"
#include "nn/models/gpt.h"

namespace dt::nn {

// What config.json says, as far as the model is concerned.
struct HfConfig {
  GptConfig model;
  std::string architecture = "LlamaForCausalLM";  // LlamaForCausalLM, Qwen2ForCausalLM or MistralForCausalLM
  std::string model_type = "llama";               // llama, qwen2, mistral
  DType dtype = DType::f32;                       // the weights' dtype on disk (torch_dtype / dtype)
  int64_t max_position_embeddings = 2048;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // one or several (Llama 3 lists several)
  std::optional<int64_t> pad_token_id;
};

// Reads `path` (a model folder or its config.json). An unknown architecture, an activation other than silu, a
// sliding window in use, heads that do not divide, or a missing or mistyped field is an InvalidArgument naming the
// file and the field.
HfConfig read_hf_config(const std::string& path);
// The config.json text for `config` (pretty-printed; rope_theta / rope_scaling as transformers 4 and 5 both read).
std::string hf_config_json(const HfConfig& config);

// The Hugging Face name of a module parameter ("layers.3.attention.wq.weight" ->
// "model.layers.3.self_attn.q_proj.weight"), and back; nullopt when the table has no row for it.
std::optional<std::string> to_hf_name(const std::string& fqn);
std::optional<std::string> from_hf_name(const std::string& hf_name);

// The weights file of a folder: model.safetensors.index.json when present, else model.safetensors (InvalidArgument
// naming the folder when neither is there).
std::string hf_weights_path(const std::string& folder);

// Fills every parameter of `model` (a Gpt, parallelized and materialized in any layout, FSDP included) from the
// folder's weights, converting f32 / bf16 / f16 on load. Strict: a tensor of the model missing from the files, or a
// tensor in the files the model does not have (but a tied lm_head.weight), is an InvalidArgument listing them, before
// any parameter changes. Collective over the model's world (each rank reads its own blocks; no communication but for
// the parameters' own layouts).
checkpoint::LoadResult load_hf_weights(const std::string& folder, Module& model);

struct HfSaveOptions {
  std::optional<DType> dtype;    // the weights' dtype on disk (default: the config's dtype)
  uint64_t max_shard_bytes = 0;  // 0: one model.safetensors; else shards of at most this size plus the index
  std::function<void(uint64_t done, uint64_t total)> progress = {};  // this rank's bytes (checkpoint::ExportOptions)
};

// Writes config.json and the weights of `model` into `folder` (created when missing), named by the table.
// Collective over the model's world like checkpoint::export_safetensors: every rank writes its own blocks, rank 0
// the config.
void save_hf(const std::string& folder, const Module& model, const HfConfig& config, const HfSaveOptions& options = {});

}  // namespace dt::nn
