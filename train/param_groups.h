// Optimizer parameter groups the way LLM recipes make them (nanoGPT, torchtitan): weight decay on the matrices, off
// for norms, biases and embeddings by default; a learning-rate scale per name pattern.
//
//   nn::AdamW opt(train::param_groups(*model, {.weight_decay = 0.1}), {.lr = 3e-4, .beta2 = 0.95});
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "nn/optim.h"

namespace dt::train {

struct ParamGroupOptions {
  double weight_decay = 0.1;      // of the decayed group (the other gets 0)
  bool decay_norms = false;       // RMSNorm / LayerNorm weights and biases
  bool decay_biases = false;      // every parameter named "bias"
  bool decay_embeddings = false;  // Embedding weights (a tied output head with them)
  // Learning-rate scales by fully-qualified-name pattern ('*' one name component, as parallel plans): the first
  // pattern a parameter matches gives its scale (default 1). A pattern that matches nothing is an InvalidArgument.
  std::vector<std::pair<std::string, double>> lr_scales;
};

// The model's parameters (each once, in named_parameters order within each group) in groups of equal (decay,
// lr scale), named "decay" / "no_decay" (with " lr x<scale>" when the scale is not 1); empty groups are left out.
std::vector<nn::ParamGroup> param_groups(nn::Module& model, const ParamGroupOptions& options = {});

}  // namespace dt::train
