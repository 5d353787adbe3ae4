// train::param_groups and optimizers over groups: the classification (decay on matrices; not on norms, biases and
// embeddings unless asked; lr scales by pattern), and AdamW / SGD over groups against one optimizer per group with
// that group's settings (the single-group code path), step by step, on one rank and on tp 2.
#include "train/param_groups.h"

#include <gtest/gtest.h>

#include <set>

#include "nn/autograd.h"
#include "nn/models/gpt.h"
#include "nn/optim.h"
#include "nn/parallel.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt::train {
namespace {

nn::GptConfig config() {
  nn::GptConfig c;
  c.vocab = 13;
  c.dim = 8;
  c.layers = 2;
  c.heads = 2;
  c.hidden = 12;
  c.qkv_bias = true;
  return c;
}

std::set<std::string> names_of(nn::Module& model, const nn::ParamGroup& g) {
  std::set<std::string> out;
  for (const auto& [fqn, p] : model.named_parameters())
    for (const nn::Variable& q : g.params)
      if (q.impl() == p.impl()) out.insert(fqn);
  return out;
}

TEST(ParamGroups, DecayOnMatricesOnlyAndLrScalesByPattern) {
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    auto model = std::make_shared<nn::Gpt>(config());
    model->materialize(mesh, 1);
    auto groups = param_groups(*model, {.weight_decay = 0.1,
                                        .decay_norms = false,
                                        .decay_biases = false,
                                        .decay_embeddings = false,
                                        .lr_scales = {{"output.*", 0.5}}});
    ASSERT_EQ(groups.size(), 3u);
    std::map<std::string, std::set<std::string>> by;
    for (const auto& g : groups) by[g.name] = names_of(*model, g);
    EXPECT_TRUE(by["decay"].count("layers.0.attention.wq.weight"));
    EXPECT_TRUE(by["decay"].count("layers.1.feed_forward.w2.weight"));
    for (const char* n :
         {"tok_embeddings.weight", "norm.weight", "layers.0.attention_norm.weight", "layers.1.attention.wk.bias"})
      EXPECT_TRUE(by["no_decay"].count(n)) << n;
    EXPECT_EQ(by["decay lr x0.5"], std::set<std::string>{"output.weight"});
    size_t total = 0;
    for (const auto& g : groups) {
      total += g.params.size();
      EXPECT_EQ(*g.weight_decay, g.name.rfind("decay", 0) == 0 ? 0.1 : 0.0) << g.name;
    }
    EXPECT_EQ(total, model->parameters().size());
    // Everything decays when asked; a pattern that matches nothing is refused.
    EXPECT_EQ(
        param_groups(
            *model,
            {.weight_decay = 0.1, .decay_norms = true, .decay_biases = true, .decay_embeddings = true, .lr_scales = {}})
            .size(),
        1u);
    EXPECT_THROW(param_groups(*model, {.weight_decay = 0.1,
                                       .decay_norms = false,
                                       .decay_biases = false,
                                       .decay_embeddings = false,
                                       .lr_scales = {{"head.*", 2.0}}}),
                 InvalidArgument);
  });
}

TEST(ParamGroups, GroupedOptimizersEqualOneOptimizerPerGroup) {
  for (int64_t tp : {1, 2}) {
    op_test::Failures f;
    op_test::on_mesh({tp}, [&](const DeviceMesh& mesh) {
      for (bool adam : {true, false}) {
        auto a = std::make_shared<nn::Gpt>(config()), b = std::make_shared<nn::Gpt>(config());
        for (auto& m : {a, b}) {
          if (tp > 1) nn::parallelize_module(m, mesh, nn::gpt_tp_plan(m->config, false, tp));
          m->materialize(mesh, 4);
        }
        const ParamGroupOptions po{.weight_decay = 0.2,
                                   .decay_norms = false,
                                   .decay_biases = false,
                                   .decay_embeddings = false,
                                   .lr_scales = {{"layers.1.*.*.weight", 3.0}}};
        const auto ga = param_groups(*a, po), gb = param_groups(*b, po);
        std::unique_ptr<nn::Optimizer> grouped;
        std::vector<std::unique_ptr<nn::Optimizer>> separate;
        const double lr = 0.01;
        if (adam) {
          grouped = std::make_unique<nn::AdamW>(ga, nn::AdamWOptions{.lr = lr, .weight_decay = 0.9});
          for (const auto& g : gb)
            separate.push_back(std::make_unique<nn::AdamW>(
                g.params, nn::AdamWOptions{.lr = lr * g.lr_scale, .weight_decay = *g.weight_decay}));
        } else {
          grouped = std::make_unique<nn::SGD>(ga, nn::SgdOptions{.lr = lr, .momentum = 0.9, .weight_decay = 0.9});
          for (const auto& g : gb)
            separate.push_back(std::make_unique<nn::SGD>(
                g.params, nn::SgdOptions{.lr = lr * g.lr_scale, .momentum = 0.9, .weight_decay = *g.weight_decay}));
        }
        for (int64_t step = 0; step < 3; ++step) {
          const DTensor ids = as_replicate(Tensor::from_data(std::vector<int64_t>{1, 5, 7, 2, 9, 3}, {2, 3}), mesh);
          for (auto& m : {a, b}) nn::sum((*m)(nn::Variable(ids))).backward();
          grouped->step();
          grouped->zero_grad();
          for (auto& o : separate) {
            o->step();
            o->zero_grad();
          }
        }
        const auto pa = a->named_parameters(), pb = b->named_parameters();
        for (size_t i = 0; i < pa.size(); ++i) {
          if (!equal(pa[i].second.full_tensor(), pb[i].second.full_tensor()))
            f.add(std::string(adam ? "AdamW" : "SGD") + " tp " + std::to_string(tp) + ": " + pa[i].first + " differs");
          f.add_cases(1);
        }
      }
    });
    f.report(10);
  }
}

}  // namespace
}  // namespace dt::train
