// Attention and TransformerBlock (nn/layers.h).
#include "core/error.h"
#include "nn/layers.h"

namespace dt::nn {

namespace {
AttentionOptions with_theta(double theta) {
  AttentionOptions o;
  o.rope_theta = theta;
  return o;
}
}  // namespace

Attention::Attention(int64_t d, int64_t h, double theta) : Attention(d, h, with_theta(theta)) {}

Attention::Attention(int64_t d, int64_t h, const AttentionOptions& o)
    : Module("Attention"),
      dim(d),
      heads(h),
      kv_heads(o.kv_heads > 0 ? o.kv_heads : h),
      head_dim(o.head_dim > 0 ? o.head_dim : (h > 0 ? d / h : 0)),
      options(o) {
  DT_CHECK_ARG(d > 0 && h > 0 && o.kv_heads >= 0 && o.head_dim >= 0, "Attention: dim ", d, ", heads ", h, ", kv_heads ",
               o.kv_heads, " and head_dim ", o.head_dim, " must be positive (0: the default)");
  DT_CHECK_ARG(o.head_dim > 0 || d % h == 0, "Attention: dim ", d, " must be a multiple of heads ", h,
               " when head_dim is not given");
  DT_CHECK_ARG(h % kv_heads == 0, "Attention: heads ", h, " must be a multiple of kv_heads ", kv_heads);
  DT_CHECK_ARG(head_dim % 2 == 0, "Attention: head_dim ", head_dim, " must be even (rotary embeddings)");
  wq = register_module("wq", std::make_shared<Linear>(d, h * head_dim, o.qkv_bias));
  wk = register_module("wk", std::make_shared<Linear>(d, kv_heads * head_dim, o.qkv_bias));
  wv = register_module("wv", std::make_shared<Linear>(d, kv_heads * head_dim, o.qkv_bias));
  wo = register_module("wo", std::make_shared<Linear>(h * head_dim, d, o.o_bias));
  inv_freq_ = rope_inv_freq(head_dim, o.rope_theta, o.rope_scaling);
}

namespace {

// x's blocks with whole positions and head dims (dims 2 and 3 of [B, H, T, D] not sharded, nothing Partial), so a
// cache slot range is a local slice.
Variable whole_positions(const Variable& x) {
  std::vector<Placement> p = x.placements();
  for (Placement& q : p)
    if (is_partial(q) || (is_shard(q) && std::get<Shard>(q).dim != 0 && std::get<Shard>(q).dim != 1)) q = Replicate{};
  return p == x.placements() ? x : redistribute(x, p);
}

// Writes x [B, H, t, D] into the cache tensor's slots [at, at + t) (allocating it first) and returns the filled
// slots [0, at + t) as a view.
DTensor append(DTensor& cache, const DTensor& x, int64_t capacity, int64_t at) {
  const Shape& g = x.shape();
  if (!cache.defined()) {
    Shape local = x.to_local().shape();
    local[2] = capacity;
    cache = DTensor::from_local_unchecked(Tensor::empty(local, x.dtype(), x.to_local().device()), x.mesh(), x.spec(),
                                          {g[0], g[1], capacity, g[3]});
  }
  DT_CHECK_ARG(cache.spec() == x.spec() && cache.shape()[0] == g[0] && cache.shape()[1] == g[1],
               "Attention: the KV cache holds ", shape_str(cache.shape()), " laid out ", to_string(cache.placements()),
               " but the new keys are ", shape_str(g), " laid out ", to_string(x.placements()));
  const int64_t t = g[2];
  if (x.mesh().is_member()) Tensor(cache.to_local().narrow(2, at, t)).copy_(x.to_local());
  return DTensor::from_local_unchecked(cache.to_local().narrow(2, 0, at + t), x.mesh(), x.spec(),
                                       {g[0], g[1], at + t, g[3]});
}

}  // namespace

std::vector<Variable> Attention::forward_cached(const Variable& x) {
  KvCache& c = *cache;
  const int64_t b = x.shape()[0], t = x.shape()[1];
  DT_CHECK_ARG(c.length + t <= c.capacity, "Attention: the KV cache holds ", c.capacity, " positions; ", c.length,
               " are filled and ", t, " more do not fit");
  DT_CHECK_ARG(c.key_start.empty() || int64_t(c.key_start.size()) == b, "Attention: the KV cache has ",
               c.key_start.size(), " key_start entries for a batch of ", b);
  std::vector<int64_t> starts(static_cast<size_t>(b));
  for (int64_t r = 0; r < b; ++r) starts[size_t(r)] = c.length - (c.key_start.empty() ? 0 : c.key_start[size_t(r)]);
  const RopeTables rope = rope_tables(starts, t, inv_freq_, x.mesh(), x.dtype());
  auto heads_of = [&](const Variable& y, int64_t n) { return transpose(reshape(y, {b, t, n, head_dim}), 1, 2); };
  Variable q = apply_rope(heads_of((*wq)(x), heads), rope.cos, rope.sin);
  Variable k = whole_positions(apply_rope(heads_of((*wk)(x), kv_heads), rope.cos, rope.sin));
  Variable v = whole_positions(heads_of((*wv)(x), kv_heads));
  const DTensor keys = append(c.k, k.data(), c.capacity, c.length);
  const DTensor values = append(c.v, v.data(), c.capacity, c.length);
  c.length += t;
  Variable o = fused_attention(q, Variable(keys), Variable(values),
                               {.causal = true, .scale = std::nullopt, .key_start = c.key_start});
  return {(*wo)(reshape(transpose(o, 1, 2), {b, t, heads * head_dim}))};
}

std::vector<Variable> Attention::forward(const std::vector<Variable>& in) {
  const Variable& x = in.at(0);
  DT_CHECK_ARG(x.dim() == 3 && x.shape()[2] == dim, "Attention: expects x [batch, seq, ", dim, "], got ",
               shape_str(x.shape()));
  if (cache) return forward_cached(x);
  const int64_t b = x.shape()[0], t = x.shape()[1];
  if (rope_seq_ != t || !(rope_mesh_ == x.mesh())) {
    rope_ = rope_tables(0, t, inv_freq_, x.mesh(), x.dtype());
    rope_seq_ = t;
    rope_mesh_ = x.mesh();
  }
  auto heads_of = [&](const Variable& y, int64_t n) { return transpose(reshape(y, {b, t, n, head_dim}), 1, 2); };
  Variable q = apply_rope(heads_of((*wq)(x), heads), rope_.cos, rope_.sin);
  Variable k = apply_rope(heads_of((*wk)(x), kv_heads), rope_.cos, rope_.sin);
  Variable v = heads_of((*wv)(x), kv_heads);
  Variable o = fused_attention(q, k, v);
  return {(*wo)(reshape(transpose(o, 1, 2), {b, t, heads * head_dim}))};
}

TransformerBlock::TransformerBlock(int64_t dim, int64_t heads, int64_t hidden, NormKind norm, MlpKind mlp, double eps,
                                   double theta)
    : TransformerBlock(dim, heads, hidden, norm, mlp, eps, with_theta(theta)) {}

TransformerBlock::TransformerBlock(int64_t dim, int64_t heads, int64_t hidden, NormKind norm, MlpKind mlp, double eps,
                                   const AttentionOptions& attn, bool mlp_bias)
    : Module("TransformerBlock") {
  attention_norm = register_module("attention_norm", make_norm(norm, dim, eps));
  attention = register_module("attention", std::make_shared<Attention>(dim, heads, attn));
  ffn_norm = register_module("ffn_norm", make_norm(norm, dim, eps));
  if (mlp == MlpKind::kSwiGlu)
    feed_forward = register_module(
        "feed_forward", std::static_pointer_cast<Module>(std::make_shared<SwiGluMlp>(dim, hidden, mlp_bias)));
  else
    feed_forward = register_module("feed_forward",
                                   std::static_pointer_cast<Module>(std::make_shared<GeluMlp>(dim, hidden, mlp_bias)));
}

std::vector<Variable> TransformerBlock::forward(const std::vector<Variable>& in) {
  const Variable& x = in.at(0);
  Variable h = add(x, (*attention)((*attention_norm)(x)));
  return {add(h, (*feed_forward)((*ffn_norm)(h)))};
}

}  // namespace dt::nn
