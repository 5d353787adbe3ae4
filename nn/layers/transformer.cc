// Attention and TransformerBlock (nn/layers.h).
#include "core/error.h"
#include "nn/layers.h"

namespace dt::nn {

Attention::Attention(int64_t d, int64_t h, double theta)
    : Module("Attention"), dim(d), heads(h), head_dim(h > 0 ? d / h : 0), rope_theta(theta) {
  DT_CHECK_ARG(h > 0 && d % h == 0, "Attention: dim ", d, " must be a positive multiple of heads ", h);
  DT_CHECK_ARG(head_dim % 2 == 0, "Attention: head_dim ", head_dim, " must be even (rotary embeddings)");
  wq = register_module("wq", std::make_shared<Linear>(d, d, false));
  wk = register_module("wk", std::make_shared<Linear>(d, d, false));
  wv = register_module("wv", std::make_shared<Linear>(d, d, false));
  wo = register_module("wo", std::make_shared<Linear>(d, d, false));
}

std::vector<Variable> Attention::forward(const std::vector<Variable>& in) {
  const Variable& x = in.at(0);
  DT_CHECK_ARG(x.dim() == 3 && x.shape()[2] == dim, "Attention: expects x [batch, seq, ", dim, "], got ",
               shape_str(x.shape()));
  const int64_t b = x.shape()[0], t = x.shape()[1];
  if (rope_seq_ != t || !(rope_mesh_ == x.mesh())) {
    rope_ = rope_tables(t, head_dim, rope_theta, x.mesh(), x.dtype());
    mask_ = causal_mask(t, t, x.mesh());
    rope_seq_ = t;
    rope_mesh_ = x.mesh();
  }
  auto heads_of = [&](const Variable& y) { return transpose(reshape(y, {b, t, heads, head_dim}), 1, 2); };
  Variable q = apply_rope(heads_of((*wq)(x)), rope_.cos, rope_.sin);
  Variable k = apply_rope(heads_of((*wk)(x)), rope_.cos, rope_.sin);
  Variable v = heads_of((*wv)(x));
  Variable o = scaled_dot_product_attention(q, k, v, /*causal=*/true, std::nullopt, mask_);
  return {(*wo)(reshape(transpose(o, 1, 2), {b, t, dim}))};
}

TransformerBlock::TransformerBlock(int64_t dim, int64_t heads, int64_t hidden, NormKind norm, MlpKind mlp, double eps,
                                   double theta)
    : Module("TransformerBlock") {
  attention_norm = register_module("attention_norm", make_norm(norm, dim, eps));
  attention = register_module("attention", std::make_shared<Attention>(dim, heads, theta));
  ffn_norm = register_module("ffn_norm", make_norm(norm, dim, eps));
  if (mlp == MlpKind::kSwiGlu)
    feed_forward =
        register_module("feed_forward", std::static_pointer_cast<Module>(std::make_shared<SwiGluMlp>(dim, hidden)));
  else
    feed_forward =
        register_module("feed_forward", std::static_pointer_cast<Module>(std::make_shared<GeluMlp>(dim, hidden)));
}

std::vector<Variable> TransformerBlock::forward(const std::vector<Variable>& in) {
  const Variable& x = in.at(0);
  Variable h = add(x, (*attention)((*attention_norm)(x)));
  return {add(h, (*feed_forward)((*ffn_norm)(h)))};
}

}  // namespace dt::nn
