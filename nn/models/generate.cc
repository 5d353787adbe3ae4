// Text generation (nn/models/generate.h).
#include "nn/models/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/splitmix.h"
#include "dtensor/ops/elementwise.h"

namespace dt::nn {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Puts the model in generation mode (eval, a cache per layer, logits of the last position only) and back.
class GenerationMode {
 public:
  GenerationMode(Gpt& model, int64_t capacity, const std::vector<int64_t>& key_start)
      : model_(model), training_(model.is_training()), keep_(model.logits_to_keep) {
    model.eval();
    model.logits_to_keep = 1;
    for (auto& block : model.layers) {
      auto c = std::make_shared<KvCache>();
      c->capacity = capacity;
      c->key_start = key_start;
      block->attention->cache = c;
    }
  }
  ~GenerationMode() {
    for (auto& block : model_.layers) block->attention->cache.reset();
    model_.logits_to_keep = keep_;
    model_.train(training_);
  }
  GenerationMode(const GenerationMode&) = delete;
  GenerationMode& operator=(const GenerationMode&) = delete;

 private:
  Gpt& model_;
  bool training_;
  int64_t keep_;
};

// The uniform number of (seed, step, row) in [0, 1).
double uniform(uint64_t seed, int64_t step, int64_t row) {
  const uint64_t h = splitmix64(splitmix64(seed ^ 0x6a09e667f3bcc909ull) ^ (uint64_t(step) << 20) ^ uint64_t(row));
  return double(h >> 11) * 0x1.0p-53;
}

// One step: the model on ids [B, T] (Replicate), the last position's logits of every row, whole, as f32 on the host.
Tensor last_logits(Gpt& model, const Tensor& ids, const DeviceMesh& mesh) {
  Variable logits = model(Variable(as_replicate(ids, mesh)));
  return logits.data().full_tensor().to(DType::f32).to(Device::cpu()).contiguous();
}

}  // namespace

double GenerateResult::decode_tokens_per_second() const {
  size_t rows = tokens.size();
  return decode_seconds > 0 ? double(decode_steps) * double(rows) / decode_seconds : 0;
}

int64_t choose_token(const float* logits, int64_t vocab, const GenerateOptions& o, double u) {
  DT_CHECK_ARG(vocab > 0, "generate: empty vocabulary");
  for (int64_t i = 0; i < vocab; ++i)
    DT_CHECK_ARG(!std::isnan(logits[i]), "generate: the logit of token ", i, " is NaN (the model's weights or input ",
                 "are not finite)");
  if (o.temperature <= 0) return int64_t(std::max_element(logits, logits + vocab) - logits);
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  auto by_logit = [&](int64_t a, int64_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t keep = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
  std::vector<double> p(static_cast<size_t>(keep));
  const double top = double(logits[order[0]]) / o.temperature;
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i)
    sum += p[size_t(i)] = std::exp(double(logits[order[size_t(i)]]) / o.temperature - top);
  if (o.top_p < 1) {  // the smallest prefix whose probability reaches top_p (at least one token)
    double cum = 0;
    int64_t n = 0;
    while (n < keep && (n == 0 || cum < o.top_p * sum)) cum += p[size_t(n++)];
    keep = n;
    sum = cum;
  }
  double target = u * sum, cum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    cum += p[size_t(i)];
    if (target < cum) return order[size_t(i)];
  }
  return order[size_t(keep - 1)];
}

GenerateResult generate(Gpt& model, const DeviceMesh& mesh, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& o) {
  const int64_t vocab = model.config.vocab;
  DT_CHECK_ARG(!prompts.empty(), "generate: no prompts");
  DT_CHECK_ARG(o.max_new_tokens >= 0 && o.temperature >= 0 && o.top_k >= 0 && o.top_p > 0 && o.top_p <= 1,
               "generate: max_new_tokens ", o.max_new_tokens, ", temperature ", o.temperature, ", top_k ", o.top_k,
               " and top_p ", o.top_p, " must be >= 0, >= 0, >= 0 and in (0, 1]");
  DT_CHECK_ARG(o.pad_token >= 0 && o.pad_token < vocab, "generate: pad_token ", o.pad_token,
               " is not in the vocabulary [0, ", vocab, ")");
  int64_t longest = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    DT_CHECK_ARG(!prompts[b].empty(), "generate: prompt ", b, " is empty (give at least one token, e.g. BOS)");
    for (int64_t id : prompts[b])
      DT_CHECK_ARG(id >= 0 && id < vocab, "generate: prompt ", b, " holds token ", id, ", outside the vocabulary [0, ",
                   vocab, ")");
    longest = std::max(longest, int64_t(prompts[b].size()));
  }
  const int64_t rows = int64_t(prompts.size());
  std::vector<int64_t> key_start(static_cast<size_t>(rows));
  Tensor ids = Tensor::full({rows, longest}, double(o.pad_token), DType::i64);
  for (int64_t b = 0; b < rows; ++b) {
    const auto& pr = prompts[size_t(b)];
    key_start[size_t(b)] = longest - int64_t(pr.size());
    std::copy(pr.begin(), pr.end(), ids.data<int64_t>() + b * longest + key_start[size_t(b)]);
  }
  GenerateResult r;
  r.tokens.resize(size_t(rows));
  if (o.max_new_tokens == 0) return r;
  GenerationMode mode(model, longest + o.max_new_tokens, key_start);
  NoGradGuard no_grad;
  std::vector<bool> done(size_t(rows), false);
  std::vector<int64_t> next(static_cast<size_t>(rows));
  auto choose = [&](const Tensor& logits, int64_t step) {
    for (int64_t b = 0; b < rows; ++b) {
      if (done[size_t(b)]) {
        next[size_t(b)] = o.pad_token;
        continue;
      }
      const double u = o.temperature > 0 ? uniform(o.seed, step, b) : 0;
      next[size_t(b)] = choose_token(logits.data<float>() + b * vocab, vocab, o, u);
      r.tokens[size_t(b)].push_back(next[size_t(b)]);
      if (std::find(o.stop_tokens.begin(), o.stop_tokens.end(), next[size_t(b)]) != o.stop_tokens.end())
        done[size_t(b)] = true;
    }
    if (o.on_step) o.on_step(step, next);
  };
  const auto start = Clock::now();
  choose(last_logits(model, ids, mesh), 0);
  r.prefill_seconds = r.time_to_first_token_seconds = seconds_since(start);
  const auto decode_start = Clock::now();
  for (int64_t step = 1; step < o.max_new_tokens; ++step) {
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    choose(last_logits(model, Tensor::from_data(next, {rows, 1}), mesh), step);
    ++r.decode_steps;
  }
  r.decode_seconds = seconds_since(decode_start);
  return r;
}

}  // namespace dt::nn
