// Generation (nn/models/generate.h): the choice of a token against the filtering written out here (temperature,
// top-k, top-p as transformers' warpers apply them), greedy generation with the KV cache against the model run on
// the whole sequence at every step without a cache (each prompt alone, so left padding is checked too), and sampled
// generation giving the same tokens on one rank and on tp 2 (grouped-query attention, key/value heads sharded and
// replicated), on the thread backend.
#include "nn/models/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "dtensor/ops/elementwise.h"
#include "nn/autograd.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using nn::GenerateOptions;

// The probabilities of each token after temperature, top-k and top-p, computed the long way (double, full sort).
std::vector<double> filtered(const std::vector<float>& logits, const GenerateOptions& o) {
  const size_t v = logits.size();
  std::vector<size_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(v, 0.0);
  const size_t k = o.top_k > 0 ? std::min(size_t(o.top_k), v) : v;
  double z = 0;
  for (size_t i = 0; i < k; ++i) z += std::exp(double(logits[order[i]]) / o.temperature);
  // top-p: keep the most likely tokens while the probability before each is below top_p (the first always).
  double before = 0;
  std::vector<double> out(v, 0.0);
  double kept = 0;
  for (size_t i = 0; i < k; ++i) {
    const double q = std::exp(double(logits[order[i]]) / o.temperature) / z;
    if (i > 0 && before >= o.top_p) break;
    out[order[i]] = q;
    kept += q;
    before += q;
  }
  for (double& x : out) x /= kept;
  return out;
}

TEST(Generate, ChooseTokenFollowsTheFilteredDistribution) {
  const std::vector<float> logits = {0.3f, 2.0f, -1.0f, 2.0f, 0.9f, -3.0f, 1.4f, 0.0f, 0.5f, 1.1f};
  GenerateOptions greedy;
  EXPECT_EQ(nn::choose_token(logits.data(), int64_t(logits.size()), greedy, 0.5), 1);  // the first maximum
  struct Setting {
    double temperature;
    int64_t top_k;
    double top_p;
  };
  for (Setting s : {Setting{1.0, 0, 1.0}, {0.7, 0, 1.0}, {1.3, 4, 1.0}, {1.0, 0, 0.6}, {0.8, 5, 0.75}, {1.0, 1, 1.0}}) {
    GenerateOptions o;
    o.temperature = s.temperature;
    o.top_k = s.top_k;
    o.top_p = s.top_p;
    const std::vector<double> want = filtered(logits, o);
    std::vector<double> got(logits.size(), 0.0);
    const int n = 200000;
    for (int i = 0; i < n; ++i)
      got[size_t(nn::choose_token(logits.data(), int64_t(logits.size()), o, (i + 0.5) / n))] += 1.0 / n;
    for (size_t t = 0; t < logits.size(); ++t) {
      EXPECT_NEAR(got[t], want[t], 2e-5) << "token " << t << " temperature " << s.temperature << " top_k " << s.top_k
                                         << " top_p " << s.top_p;
      if (want[t] == 0) {
        EXPECT_EQ(got[t], 0) << "token " << t << " is filtered out but was chosen";
      }
    }
  }
  const std::vector<float> bad = {0.0f, NAN};
  EXPECT_THROW(nn::choose_token(bad.data(), 2, greedy, 0), InvalidArgument);
}

nn::GptConfig config() {
  nn::GptConfig c;
  c.vocab = 23;  // uneven over tp 2
  c.dim = 16;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.hidden = 24;
  c.qkv_bias = true;
  return c;
}

// Greedy tokens of one prompt without a cache: the whole sequence through the model at every step.
std::vector<int64_t> greedy_without_cache(nn::Gpt& model, const DeviceMesh& mesh, std::vector<int64_t> seq,
                                          int64_t steps) {
  nn::NoGradGuard no_grad;
  model.eval();
  std::vector<int64_t> out;
  for (int64_t s = 0; s < steps; ++s) {
    const Tensor ids = Tensor::from_data(seq, {1, int64_t(seq.size())});
    const Tensor logits = model(nn::Variable(as_replicate(ids, mesh))).full_tensor().to(DType::f32).contiguous();
    const float* last = logits.data<float>() + (int64_t(seq.size()) - 1) * model.config.vocab;
    const int64_t next = int64_t(std::max_element(last, last + model.config.vocab) - last);
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

TEST(Generate, GreedyWithTheCacheEqualsTheWholeSequenceEveryStep) {
  const std::vector<std::vector<int64_t>> prompts = {{3, 7, 1}, {5}, {2, 9, 4, 4, 13, 6}};
  for (int64_t tp : {1, 2}) {
    op_test::Failures f;
    op_test::on_mesh({tp}, [&](const DeviceMesh& mesh) {
      auto model = std::make_shared<nn::Gpt>(config());
      if (tp > 1) nn::parallelize_module(model, mesh, nn::gpt_tp_plan(model->config, false, tp));
      model->materialize(mesh, 5);
      GenerateOptions o;
      o.max_new_tokens = 7;
      const nn::GenerateResult r = nn::generate(*model, mesh, prompts, o);
      for (size_t b = 0; b < prompts.size(); ++b) {
        const std::vector<int64_t> want = greedy_without_cache(*model, mesh, prompts[b], 7);
        if (r.tokens[b] != want) f.add("tp " + std::to_string(tp) + " prompt " + std::to_string(b) + " differs");
        f.add_cases(1);
      }
      // Stop tokens end a row (the stop token kept); max_new_tokens 0 gives nothing.
      o.stop_tokens = {r.tokens[0][2]};
      const nn::GenerateResult s = nn::generate(*model, mesh, prompts, o);
      const auto stop_at = std::find(r.tokens[0].begin(), r.tokens[0].end(), r.tokens[0][2]) - r.tokens[0].begin();
      if (s.tokens[0] != std::vector<int64_t>(r.tokens[0].begin(), r.tokens[0].begin() + stop_at + 1))
        f.add("the stop token does not end row 0");
      o.max_new_tokens = 0;
      if (!nn::generate(*model, mesh, prompts, o).tokens[0].empty()) f.add("max_new_tokens 0 generated tokens");
      f.add_cases(2);
    });
    f.report(5);
  }
}

TEST(Generate, SamplingGivesTheSameTokensOnEveryMesh) {
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4, 5}};
  GenerateOptions o;
  o.max_new_tokens = 10;
  o.temperature = 0.9;
  o.top_k = 12;
  o.top_p = 0.95;
  o.seed = 42;
  std::map<std::string, std::vector<std::vector<int64_t>>> got;
  for (int64_t tp : {1, 2}) {
    for (bool replicate_kv : {false, true}) {
      op_test::on_mesh({tp}, [&](const DeviceMesh& mesh) {
        auto model = std::make_shared<nn::Gpt>(config());
        // tp_size 3 does not divide 2 kv heads: the plan replicates k and v over tp.
        if (tp > 1) nn::parallelize_module(model, mesh, nn::gpt_tp_plan(model->config, false, replicate_kv ? 3 : tp));
        model->materialize(mesh, 5);
        const auto tokens = nn::generate(*model, mesh, prompts, o).tokens;
        if (mesh.global_rank() == 0) got[std::to_string(tp) + (replicate_kv ? " kv replicated" : "")] = tokens;
      });
    }
  }
  for (const auto& [name, tokens] : got) EXPECT_EQ(tokens, got.begin()->second) << name;
  // Another seed gives other tokens.
  o.seed = 43;
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    auto model = std::make_shared<nn::Gpt>(config());
    model->materialize(mesh, 5);
    EXPECT_NE(nn::generate(*model, mesh, prompts, o).tokens, got.begin()->second);
  });
}

TEST(Generate, BadInputIsNamed) {
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    auto model = std::make_shared<nn::Gpt>(config());
    model->materialize(mesh, 5);
    GenerateOptions o;
    EXPECT_THROW(nn::generate(*model, mesh, {}, o), InvalidArgument);
    EXPECT_THROW(nn::generate(*model, mesh, {{}}, o), InvalidArgument);
    EXPECT_THROW(nn::generate(*model, mesh, {{1, 23}}, o), InvalidArgument);  // outside the vocabulary
    o.top_p = 0;
    EXPECT_THROW(nn::generate(*model, mesh, {{1}}, o), InvalidArgument);
    // Nothing is left set on the model after an error or a run: training goes on as before.
    for (auto& block : model->layers) EXPECT_EQ(block->attention->cache, nullptr);
    EXPECT_TRUE(model->is_training());
  });
}

}  // namespace
}  // namespace dt
