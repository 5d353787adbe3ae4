// A Hugging Face Llama-family folder on a (dp, tp) mesh of the world, for the programs that load one
// (examples/generate, the tests' fine-tuning helper): the model built from config.json, tensor-parallel over tp
// (nn::gpt_tp_plan: key/value heads sharded when tp divides them, replicated otherwise), FSDP over dp when asked
// (each block, then the root; gradients summed over dp, so a training loss is each rank's share of the global mean),
// and the weights read by every rank for its own blocks only (nn::load_hf_weights).
// Header-only, like examples/program_world.h.
#pragma once

#include <memory>
#include <string>

#include "dtensor/device_mesh.h"
#include "fsdp/fully_shard.h"
#include "nn/models/gpt.h"
#include "nn/models/hf.h"

namespace dt::examples {

struct HfModel {
  nn::HfConfig config;
  DeviceMesh mesh;  // (dp, tp)
  std::shared_ptr<nn::Gpt> model;
};

inline HfModel load_hf_model(const std::string& folder, int64_t dp, int64_t tp, bool fsdp,
                             DeviceType device = DeviceType::kCPU) {
  HfModel m;
  m.config = nn::read_hf_config(folder);
  m.mesh = DeviceMesh::create(device, {dp, tp}, {"dp", "tp"});
  m.model = std::make_shared<nn::Gpt>(m.config.model);
  if (tp > 1) nn::parallelize_module(m.model, m.mesh["tp"], nn::gpt_tp_plan(m.config.model, false, tp));
  m.model->materialize_empty(m.mesh["tp"]);  // every value comes from the folder
  if (fsdp) {
    fsdp::FsdpOptions o{.mesh_dims = {"dp"}, .gradient_divide_factor = 1.0};
    for (auto& block : m.model->layers) fsdp::fully_shard(block, m.mesh, o);
    fsdp::fully_shard(m.model, m.mesh, o);
  }
  nn::load_hf_weights(folder, *m.model);
  return m;
}

}  // namespace dt::examples
