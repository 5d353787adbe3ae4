// Gpt (nn/models/gpt.h).
#include "nn/models/gpt.h"

#include "core/error.h"

namespace dt::nn {

AttentionOptions GptConfig::attention() const {
  return AttentionOptions{.kv_heads = kv_heads,
                          .head_dim = head_dim,
                          .rope_theta = rope_theta,
                          .rope_scaling = rope_scaling,
                          .qkv_bias = qkv_bias,
                          .o_bias = o_bias};
}

Gpt::Gpt(const GptConfig& c) : Module("Gpt"), config(c) {
  DT_CHECK_ARG(c.vocab > 0 && c.dim > 0 && c.layers >= 0 && c.heads > 0, "Gpt: invalid config (vocab ", c.vocab,
               ", dim ", c.dim, ", layers ", c.layers, ", heads ", c.heads, ")");
  tok_embeddings = register_module("tok_embeddings", std::make_shared<Embedding>(c.vocab, c.dim));
  auto list = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < c.layers; ++i) {
    layers.push_back(std::make_shared<TransformerBlock>(c.dim, c.heads, c.hidden_size(), c.norm, c.mlp, c.norm_eps,
                                                        c.attention(), c.mlp_bias));
    list->append(layers.back());
  }
  register_module("layers", list);
  norm = register_module("norm", make_norm(c.norm, c.dim, c.norm_eps));
  if (!c.tie_embeddings) output = register_module("output", std::make_shared<Linear>(c.dim, c.vocab, false));
}

std::vector<Variable> Gpt::forward(const std::vector<Variable>& in) {
  DT_CHECK_ARG(in.size() == 1 && in[0].defined() && in[0].dim() == 2, "Gpt: expects token ids [batch, seq]");
  Variable h = (*tok_embeddings)(in[0]);
  for (auto& block : layers) h = (*block)(h);
  if (logits_to_keep > 0 && logits_to_keep < h.shape()[1])
    h = narrow(h, 1, h.shape()[1] - logits_to_keep, logits_to_keep);
  h = (*norm)(h);
  if (output) return {(*output)(h)};
  return {linear(h, tok_embeddings->weight)};
}

int64_t Gpt::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters()) n += p.defined() ? p.numel() : 0;
  return n;
}

ParallelPlan gpt_tp_plan(const GptConfig& c, bool sp, int64_t tp_size) {
  ParallelPlan plan;
  const Placement seq = Shard{1};
  plan.emplace_back("tok_embeddings", RowwiseParallel({.input_layouts = Replicate{},
                                                       .output_layouts = sp ? seq : Placement(Replicate{})}));
  if (sp) {
    plan.emplace_back("layers.*.attention_norm", SequenceParallel());
    plan.emplace_back("layers.*.ffn_norm", SequenceParallel());
    plan.emplace_back("norm", SequenceParallel());
  }
  // With sequence parallelism each sub-block gathers its input once (PrepareModuleInput) and scatters its output
  // (RowwiseParallel to Shard(1)): one all-gather and one reduce-scatter per sub-block and direction.
  const Placement in = sp ? seq : Placement(Replicate{});
  if (sp) {
    plan.emplace_back("layers.*.attention", PrepareModuleInput({seq}, {Replicate{}}));
    plan.emplace_back("layers.*.feed_forward", PrepareModuleInput({seq}, {Replicate{}}));
  }
  const bool shard_kv = tp_size <= 0 || c.kv_head_count() % tp_size == 0;
  for (const char* w : {"wq", "wk", "wv"})
    if (shard_kv || w[1] == 'q') plan.emplace_back(std::string("layers.*.attention.") + w, ColwiseParallel());
  plan.emplace_back("layers.*.attention.wo", RowwiseParallel({.input_layouts = std::nullopt, .output_layouts = in}));
  plan.emplace_back("layers.*.feed_forward.w1", ColwiseParallel());
  if (c.mlp == MlpKind::kSwiGlu) plan.emplace_back("layers.*.feed_forward.w3", ColwiseParallel());
  plan.emplace_back("layers.*.feed_forward.w2", RowwiseParallel({.input_layouts = std::nullopt, .output_layouts = in}));
  if (!c.tie_embeddings)
    plan.emplace_back("output", ColwiseParallel({.input_layouts = in, .output_layouts = Placement(Shard{-1})}));
  return plan;
}

}  // namespace dt::nn
