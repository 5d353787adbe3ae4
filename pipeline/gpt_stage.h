// A Gpt cut into pipeline stages (consecutive blocks; the embedding on the first stage, the final norm and the output
// projection on the last), each stage a Module whose parameters keep the whole model's names, so that checkpoints,
// initialization (seeded by name) and optimizers see the same tensors at any split:
//
//   auto model = std::make_shared<nn::Gpt>(cfg);                  // declared, not materialized
//   nn::ModulePtr stage = pipeline::gpt_stage(model, s, stages);  // shares model's blocks
//   stage->materialize(stage_mesh, seed);                          // the same draws as the whole model's
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/models/gpt.h"
#include "placement/layout.h"

namespace dt::pipeline {

// The blocks of stage `stage` of `num_stages`: as even as possible, the first stages taking one more when the count
// does not divide (torch.chunk would leave trailing stages empty). A stage may hold no block (more stages than
// blocks): it then only passes its input on, or holds the embedding or the head.
IndexRange stage_layers(int64_t num_layers, int num_stages, int stage);

// Stage `stage` of `model` (a Module sharing model's children): forward maps token ids [batch, seq] (the first
// stage) or hidden states [batch, seq, dim] (the others) to hidden states, or to the logits on the last stage.
// Tied embeddings need the embedding on the last stage too: refused when num_stages > 1.
nn::ModulePtr gpt_stage(const std::shared_ptr<nn::Gpt>& model, int stage, int num_stages);

// The parts of `model` that `stages` (of `num_stages`) hold, as one Module under the model's names: the embedding
// when stage 0 is among them, the blocks (layers.<i>), the final norm and the output projection with the last stage.
// For state dicts, checkpoints and optimizers' names; its forward is not supported (the stages run).
nn::ModulePtr gpt_rank_module(const std::shared_ptr<nn::Gpt>& model, const std::vector<int>& stages, int num_stages);

}  // namespace dt::pipeline
