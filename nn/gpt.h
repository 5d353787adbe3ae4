// A GPT-style decoder (torchtitan's Llama naming): tok_embeddings, layers.{i} (TransformerBlock), norm, output.
// Untied by default; with tie_embeddings the output projection is tok_embeddings.weight (listed once, under
// tok_embeddings.weight).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/layers.h"
#include "nn/parallel.h"

namespace dt::nn {

struct GptConfig {
  int64_t vocab = 512;
  int64_t dim = 128;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t hidden = 0;  // 0: 4 * dim
  NormKind norm = NormKind::kRMSNorm;
  MlpKind mlp = MlpKind::kSwiGlu;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_embeddings = false;
  int64_t hidden_size() const { return hidden > 0 ? hidden : 4 * dim; }
};

class Gpt : public Module {
 public:
  explicit Gpt(const GptConfig& config);
  // in[0]: token ids [batch, seq] (integer); returns the logits [batch, seq, vocab].
  std::vector<Variable> forward(const std::vector<Variable>& in) override;
  int64_t num_parameters() const;  // global element count

  GptConfig config;
  std::shared_ptr<Embedding> tok_embeddings;
  std::vector<std::shared_ptr<TransformerBlock>> layers;
  std::shared_ptr<Module> norm;
  std::shared_ptr<Linear> output;  // null when tied
};

// The Megatron plan for Gpt (torchtitan's): embedding row-sharded (vocab), attention and MLP column- then
// row-parallel, output column-parallel with class-sharded logits (loss parallel). With sequence_parallel the norms
// run on sequence shards (Shard(1)) and the all-reduces become all-gather / reduce-scatter pairs.
ParallelPlan gpt_tp_plan(const GptConfig& config, bool sequence_parallel = false);

}  // namespace dt::nn
