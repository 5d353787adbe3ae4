// The layers a transformer is made of, as Modules (nn/module.h). Parameter names, shapes and layouts are
// PyTorch's (Linear.weight is [out, in]), so state dicts and tensor-parallel plans read the same.
#pragma once

#include <cstdint>

#include "nn/module.h"
#include "nn/ops.h"

namespace dt::nn {

// y = x W^T + b. Weights ~ Normal(0, init_std) (default 0.02, GPT's), bias zeros.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, double init_std = 0.02);
  std::vector<Variable> forward(const std::vector<Variable>& in) override;
  int64_t in_features, out_features;
  Variable weight, bias;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, double init_std = 0.02);
  // in[0]: integer ids (a Variable that needs no grad).
  std::vector<Variable> forward(const std::vector<Variable>& in) override;
  int64_t num_embeddings, dim;
  Variable weight;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool bias = true);
  std::vector<Variable> forward(const std::vector<Variable>& in) override;
  int64_t dim;
  double eps;
  Variable weight, bias;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-5);
  std::vector<Variable> forward(const std::vector<Variable>& in) override;
  int64_t dim;
  double eps;
  Variable weight;
};

// w2(gelu(w1 x)) (GPT-2's MLP; names as torchtitan's feed_forward).
class GeluMlp : public Module {
 public:
  GeluMlp(int64_t dim, int64_t hidden, bool bias = false);
  std::vector<Variable> forward(const std::vector<Variable>& in) override;
  std::shared_ptr<Linear> w1, w2;
};

// w2(silu(w1 x) * w3 x) (LLaMA's SwiGLU).
class SwiGluMlp : public Module {
 public:
  SwiGluMlp(int64_t dim, int64_t hidden, bool bias = false);
  std::vector<Variable> forward(const std::vector<Variable>& in) override;
  std::shared_ptr<Linear> w1, w2, w3;
};

// The shape of an attention layer beyond (dim, heads): Llama-family options, as Hugging Face configs name them.
struct AttentionOptions {
  int64_t kv_heads = 0;  // grouped-query attention: key/value heads (0: heads); heads must be a multiple
  int64_t head_dim = 0;  // 0: dim / heads (which must divide); otherwise any even size
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;  // Llama 3's frequency scaling, or none
  bool qkv_bias = false;     // wq, wk, wv with biases (Qwen2; Llama's attention_bias)
  bool o_bias = false;       // wo with a bias (Llama's attention_bias)
};

// A key/value cache for one attention layer (generation): the keys (after RoPE) and values of every position so
// far, laid out like the layer's k and v (heads sharded over tp where wk and wv are column-parallel, replicated
// otherwise), allocated by the first forward for `capacity` positions and filled in place after that. Row b's tokens
// start at slot key_start[b] (left-padded prompts; empty: 0): its positions are slot - key_start[b], and attention
// masks the slots before it.
struct KvCache {
  int64_t capacity = 0;
  int64_t length = 0;  // slots filled
  std::vector<int64_t> key_start;
  DTensor k, v;  // [B, kv_heads, capacity, head_dim]
};

// Causal self-attention with rotary embeddings: wq [heads * head_dim, dim], wk and wv [kv_heads * head_dim, dim],
// wo [dim, heads * head_dim]. x [B, T, D] -> [B, T, D]. Grouped-query: query head h reads key/value head
// h / (heads / kv_heads). Under tensor parallelism the heads are sharded (wq/wk/wv column-parallel, wo row-parallel):
// the head counts are read from the global shapes, so any head count works; one not divisible by tp costs a
// redistribution of q, k and v.
class Attention : public Module {
 public:
  Attention(int64_t dim, int64_t heads, double rope_theta = 10000.0);
  Attention(int64_t dim, int64_t heads, const AttentionOptions& options);
  std::vector<Variable> forward(const std::vector<Variable>& in) override;
  int64_t dim, heads, kv_heads, head_dim;
  AttentionOptions options;
  std::shared_ptr<Linear> wq, wk, wv, wo;
  // Set for generation: forward appends its keys and values to the cache and attends over all of it (x holds the
  // new positions only). Null for training.
  std::shared_ptr<KvCache> cache;

 private:
  std::vector<Variable> forward_cached(const Variable& x);
  std::vector<double> inv_freq_;
  RopeTables rope_;  // cached per (seq, mesh)
  int64_t rope_seq_ = -1;
  DeviceMesh rope_mesh_;
};

enum class NormKind { kRMSNorm, kLayerNorm };
enum class MlpKind { kSwiGlu, kGelu };

// Pre-norm block: h = x + attention(attention_norm(x)); out = h + feed_forward(ffn_norm(h)).
class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t dim, int64_t heads, int64_t hidden, NormKind norm = NormKind::kRMSNorm,
                   MlpKind mlp = MlpKind::kSwiGlu, double norm_eps = 1e-5, double rope_theta = 10000.0);
  TransformerBlock(int64_t dim, int64_t heads, int64_t hidden, NormKind norm, MlpKind mlp, double norm_eps,
                   const AttentionOptions& attention, bool mlp_bias = false);
  std::vector<Variable> forward(const std::vector<Variable>& in) override;
  std::shared_ptr<Module> attention_norm, ffn_norm, feed_forward;
  std::shared_ptr<Attention> attention;
};

// Dropout(p) while training (is_training()), the identity in eval mode. Each call draws the mask of nn::dropout
// (the same on every mesh and placement) from its own seed, splitmix64(seed ^ call number): set the stream with
// set_seed (default 0; also resets the call number), and every training call advances it. The seed a call used is
// kept in its autograd node (the backward applies that call's mask), and activation checkpointing's recompute
// replays the call numbers its forward saw, so the recomputed forward draws the same masks.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, uint64_t seed = 0);
  std::vector<Variable> forward(const std::vector<Variable>& in) override;
  void set_seed(uint64_t seed);
  // The seed the next training call will use.
  uint64_t next_seed() const;
  double p;

 protected:
  uint64_t* rng_counter() override { return &calls_; }

 private:
  uint64_t seed_ = 0;
  uint64_t calls_ = 0;
};

// A norm module of the given kind.
std::shared_ptr<Module> make_norm(NormKind kind, int64_t dim, double eps);

}  // namespace dt::nn
