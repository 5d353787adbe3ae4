// Gpt (nn/models/gpt.h).
#include "nn/models/gpt.h"

#include <cmath>
#include <functional>

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

// Note [Gpt initialization]
// Layers declare N(0, 0.02) weights; Gpt then sets every Linear and Embedding weight of its tree from GptInit
// (set_parameter_init, before materialize), so one scheme covers the embedding, the projections and the output, and
// the defaults leave the declared initializers as they were (the same draws as before GptInit existed). Depth
// scaling shrinks the two projections that write into the residual stream, so its variance does not grow with the
// number of blocks: GPT-2 divides by sqrt(2 layers) everywhere, torchtitan's depth_init by sqrt(2 (l + 1)) for
// block l. The truncation is in std units (torchtitan's output layer: 3; its other weights are truncated at +-2 in
// absolute terms, which at std 0.02 is no truncation at all).
Init GptInit::weight(double s) const {
  return cutoff > 0 ? Init::trunc_normal(0, s, -cutoff * s, cutoff * s) : Init::normal(0, s);
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
  const GptInit& init = c.init;
  DT_CHECK_ARG(init.std >= 0 && init.cutoff >= 0, "Gpt: invalid init (std ", init.std, ", cutoff ", init.cutoff, ")");
  // The tree is walked through named_children: named_modules needs shared_from_this, not there in a constructor.
  std::function<void(Module&)> set = [&](Module& m) {
    for (auto& [name, child] : m.named_children()) {
      if (child->type_name() == "Linear" || child->type_name() == "Embedding")
        child->set_parameter_init("weight", init.weight(init.std));
      set(*child);
    }
  };
  set(*this);
  for (size_t l = 0; l < layers.size(); ++l) {
    double s = init.std;
    if (init.depth == DepthScaling::kDepth) s /= std::sqrt(2.0 * double(l + 1));
    if (init.depth == DepthScaling::kLayers) s /= std::sqrt(2.0 * double(c.layers));
    layers[l]->attention->wo->set_parameter_init("weight", init.weight(s));
    const auto& ff = layers[l]->feed_forward;
    if (auto* mlp = dynamic_cast<SwiGluMlp*>(ff.get())) mlp->w2->set_parameter_init("weight", init.weight(s));
    if (auto* mlp = dynamic_cast<GeluMlp*>(ff.get())) mlp->w2->set_parameter_init("weight", init.weight(s));
  }
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
