// Linear, Embedding, LayerNorm, RMSNorm, the MLPs (nn/layers.h).
#include "core/error.h"
#include "core/splitmix.h"
#include "nn/layers.h"

namespace dt::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, double init_std)
    : Module("Linear"), in_features(in), out_features(out) {
  DT_CHECK_ARG(in >= 0 && out >= 0, "Linear: negative size (", in, " -> ", out, ")");
  weight = register_parameter("weight", {out, in}, Init::normal(0, init_std));
  if (has_bias) bias = register_parameter("bias", {out}, Init::zeros());
}

std::vector<Variable> Linear::forward(const std::vector<Variable>& in) {
  DT_CHECK_ARG(in.size() == 1 && in[0].defined(), "Linear: expects one input");
  DT_CHECK_ARG(in[0].dim() >= 1 && in[0].shape().back() == in_features, "Linear(", in_features, " -> ", out_features,
               "): the input's last dim must be ", in_features, ", got shape ", shape_str(in[0].shape()));
  return {linear(in[0], weight, bias)};
}

Embedding::Embedding(int64_t n, int64_t d, double init_std) : Module("Embedding"), num_embeddings(n), dim(d) {
  weight = register_parameter("weight", {n, d}, Init::normal(0, init_std));
}

std::vector<Variable> Embedding::forward(const std::vector<Variable>& in) {
  DT_CHECK_ARG(in.size() == 1 && in[0].defined(), "Embedding: expects one input (the ids)");
  return {embedding(in[0].data(), weight)};
}

LayerNorm::LayerNorm(int64_t d, double e, bool has_bias) : Module("LayerNorm"), dim(d), eps(e) {
  weight = register_parameter("weight", {d}, Init::ones());
  if (has_bias) bias = register_parameter("bias", {d}, Init::zeros());
}

std::vector<Variable> LayerNorm::forward(const std::vector<Variable>& in) {
  DT_CHECK_ARG(in.size() == 1 && in[0].defined(), "LayerNorm: expects one input");
  return {layer_norm(in[0], {dim}, weight, bias, eps)};
}

RMSNorm::RMSNorm(int64_t d, double e) : Module("RMSNorm"), dim(d), eps(e) {
  weight = register_parameter("weight", {d}, Init::ones());
}

std::vector<Variable> RMSNorm::forward(const std::vector<Variable>& in) {
  DT_CHECK_ARG(in.size() == 1 && in[0].defined(), "RMSNorm: expects one input");
  return {rms_norm(in[0], {dim}, weight, eps)};
}

GeluMlp::GeluMlp(int64_t dim, int64_t hidden, bool bias) : Module("GeluMlp") {
  w1 = register_module("w1", std::make_shared<Linear>(dim, hidden, bias));
  w2 = register_module("w2", std::make_shared<Linear>(hidden, dim, bias));
}

std::vector<Variable> GeluMlp::forward(const std::vector<Variable>& in) {
  return {(*w2)(gelu((*w1)(in.at(0)), GeluApprox::kTanh))};
}

SwiGluMlp::SwiGluMlp(int64_t dim, int64_t hidden, bool bias) : Module("SwiGluMlp") {
  w1 = register_module("w1", std::make_shared<Linear>(dim, hidden, bias));
  w2 = register_module("w2", std::make_shared<Linear>(hidden, dim, bias));
  w3 = register_module("w3", std::make_shared<Linear>(dim, hidden, bias));
}

std::vector<Variable> SwiGluMlp::forward(const std::vector<Variable>& in) {
  const Variable& x = in.at(0);
  return {(*w2)(mul(silu((*w1)(x)), (*w3)(x)))};
}

Dropout::Dropout(double p_, uint64_t seed) : Module("Dropout"), p(p_), seed_(seed) {
  DT_CHECK_ARG(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
}

void Dropout::set_seed(uint64_t seed) {
  seed_ = seed;
  calls_ = 0;
}

uint64_t Dropout::next_seed() const { return splitmix64(seed_ ^ calls_); }

std::vector<Variable> Dropout::forward(const std::vector<Variable>& in) {
  DT_CHECK_ARG(in.size() == 1 && in[0].defined(), "Dropout: expects one input");
  if (!is_training()) return {in[0]};
  const uint64_t seed = next_seed();
  ++calls_;
  return {dropout(in[0], p, seed, true)};
}

std::shared_ptr<Module> make_norm(NormKind kind, int64_t dim, double eps) {
  if (kind == NormKind::kLayerNorm) return std::make_shared<LayerNorm>(dim, eps);
  return std::make_shared<RMSNorm>(dim, eps);
}

}  // namespace dt::nn
