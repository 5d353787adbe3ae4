// A GPT-style decoder (torchtitan's Llama naming): tok_embeddings, layers.{i} (TransformerBlock), norm, output.
// Untied by default; with tie_embeddings the output projection is tok_embeddings.weight (listed once, under
// tok_embeddings.weight). With RMSNorm and SwiGLU it is the Llama family as Hugging Face ships it (Llama 2/3,
// Qwen2, Mistral without sliding windows): grouped-query attention, a head_dim of its own, Llama 3 RoPE scaling,
// q/k/v biases. nn/models/hf.h reads and writes Hugging Face model folders for it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/layers.h"
#include "nn/parallel.h"

namespace dt::nn {

// How a Gpt's weights start (Note [Gpt initialization]): every Linear and Embedding weight ~ Normal(0, std), or that
// normal truncated at +-cutoff std; the output projections of each block (attention.wo, feed_forward.w2) with a std
// scaled by depth. Norm weights ones, biases zeros. The defaults are GPT-2's plain N(0, 0.02).
enum class DepthScaling {
  kNone,
  kDepth,   // block l (0-based): std / sqrt(2 (l + 1)) (torchtitan's depth_init)
  kLayers,  // every block: std / sqrt(2 layers) (GPT-2's c_proj, torchtitan without depth_init)
};
struct GptInit {
  double std = 0.02;
  double cutoff = 0;  // > 0: truncated at +-cutoff std (torch.nn.init.trunc_normal_); 0: a plain normal
  DepthScaling depth = DepthScaling::kNone;
  Init weight(double s) const;  // the initializer of a weight of std s
};

struct GptConfig {
  int64_t vocab = 512;
  int64_t dim = 128;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 0;  // grouped-query attention: 0 means heads
  int64_t head_dim = 0;  // 0: dim / heads
  int64_t hidden = 0;    // 0: 4 * dim
  NormKind norm = NormKind::kRMSNorm;
  MlpKind mlp = MlpKind::kSwiGlu;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_embeddings = false;
  bool qkv_bias = false, o_bias = false, mlp_bias = false;
  GptInit init;
  int64_t hidden_size() const { return hidden > 0 ? hidden : 4 * dim; }
  int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : dim / heads; }
  AttentionOptions attention() const;
};

class Gpt : public Module {
 public:
  explicit Gpt(const GptConfig& config);
  // in[0]: token ids [batch, seq] (integer); returns the logits [batch, seq, vocab].
  std::vector<Variable> forward(const std::vector<Variable>& in) override;
  int64_t num_parameters() const;  // global element count
  // > 0: only the last logits_to_keep positions go through the final norm and the output projection (generation
  // needs the last one); 0: every position.
  int64_t logits_to_keep = 0;

  GptConfig config;
  std::shared_ptr<Embedding> tok_embeddings;
  std::vector<std::shared_ptr<TransformerBlock>> layers;
  std::shared_ptr<Module> norm;
  std::shared_ptr<Linear> output;  // null when tied
};

// The Megatron plan for Gpt (torchtitan's): embedding row-sharded (vocab), attention and MLP column- then
// row-parallel, output column-parallel with class-sharded logits (loss parallel). With sequence_parallel the norms
// run on sequence shards (Shard(1)) and the all-reduces become all-gather / reduce-scatter pairs. Key/value
// projections are sharded by kv heads when tp_size (the tp mesh dim's size; 0: not known) divides kv_heads, and
// replicated otherwise (each rank computes all kv heads; the query heads stay sharded).
ParallelPlan gpt_tp_plan(const GptConfig& config, bool sequence_parallel = false, int64_t tp_size = 0);

}  // namespace dt::nn
