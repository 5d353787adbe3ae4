// Checkpoints of training: a model's parameters and buffers and an optimizer's state, saved with
// dt::checkpoint (dtensor/checkpoint/checkpoint.h) from any layout and loaded into any other (FSDP on 4 ranks,
// FSDP + TP on 2x2, one process, ...).
//
//   nn::save_checkpoint("ckpt/step-100", *model, &opt, {{"step", int64_t(100)}});
//   auto r = nn::load_checkpoint(*checkpoint::latest("ckpt"), *model, &opt);   // resume
//   checkpoint::export_safetensors("model.safetensors", model->state_dict());   // weights for the ecosystem
//
// Note [Training state names]
// The names follow PyTorch's fully-qualified names, prefixed by the part they belong to, so that one checkpoint
// holds both and either can be loaded alone (non-strict):
//   model.<fqn>                      a parameter or buffer (tied weights once, under their first name)
//   optim.state.<fqn>.<state>        an optimizer state tensor (exp_avg, exp_avg_sq, momentum_buffer), laid out like
//                                    its parameter
// and scalar metadata: optim.state.<fqn>.step (each parameter's step count), optim.steps, optim.lr. A parameter
// whose state was not made yet is saved as its first step would make it (zeros, step 0), so every optimizer
// checkpoint lists every parameter.
#pragma once

#include <functional>
#include <string>

#include "dtensor/checkpoint/checkpoint.h"
#include "nn/module.h"
#include "nn/optim.h"

namespace dt::nn {

struct TrainingState {
  checkpoint::TensorList tensors;
  checkpoint::Metadata metadata;
};

// The model's and (when given) the optimizer's state under the names of Note [Training state names]. Makes the
// optimizer's missing state (zeros). Every tensor refers to the live storage (no copy).
TrainingState training_state(const Module& model, Optimizer* optimizer);

// Collective over the world, like checkpoint::save; `metadata` is added to the optimizer's (keys must not start
// with "optim.").
void save_checkpoint(const std::string& dir, const Module& model, Optimizer* optimizer,
                     const checkpoint::Metadata& metadata = {}, const checkpoint::SaveOptions& options = {});
checkpoint::SaveHandle save_checkpoint_async(const std::string& dir, const Module& model, Optimizer* optimizer,
                                             const checkpoint::Metadata& metadata = {},
                                             const checkpoint::SaveOptions& options = {});

// Loads the model (values copied into the parameters, whose identity, placements and FSDP sharding are kept) and the
// optimizer's state (loaded in place into its state tensors, with each parameter's step, optim.steps and optim.lr).
// Strict: every name of both must be in the checkpoint and nothing else (checkpoint::LoadOptions). Returns the
// checkpoint's metadata and what was missing or unexpected.
checkpoint::LoadResult load_checkpoint(const std::string& dir, Module& model, Optimizer* optimizer,
                                       const checkpoint::LoadOptions& options = {});

// The model's state read from a safetensors file or Hugging Face index into new tensors laid out like the model's
// (nothing in the model changes): `values` under the model's names (those found), `result` under the file's names.
// file_name maps a model name to the name in the file (default: the same).
struct SafetensorsValues {
  checkpoint::LoadResult result;
  StateDict values;
};
SafetensorsValues read_safetensors(const std::string& path, const Module& model,
                                   const checkpoint::LoadOptions& options = {},
                                   const std::function<std::string(const std::string&)>& file_name = {});

// The model's weights from a safetensors file or Hugging Face index (names = the model's fully-qualified names, as
// checkpoint::export_safetensors(path, model.state_dict()) writes them), into the model's layout.
checkpoint::LoadResult load_safetensors(const std::string& path, Module& model,
                                        const checkpoint::LoadOptions& options = {});

}  // namespace dt::nn
