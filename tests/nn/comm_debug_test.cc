// CommDebugMode over a module tree (dtensor/comm_debug.h, nn/comm_debug.h): a tensor-parallel GPT's forward and
// backward on a thread mesh of 2, its table checked against a CommCounter over the same calls (Global's counts and
// bytes per kind) and against Megatron's communication per block (one all-reduce in each attention and each MLP,
// forward and backward), the nesting (a block's figures are its children's), the text and JSON forms, the scope API.
#include "nn/comm_debug.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "dtensor/comm_counter.h"
#include "nn/autograd.h"
#include "nn/models/gpt.h"
#include "tests/nn/grad_test_util.h"

namespace dt {
namespace {

using nn::Variable;
using Phase = CommDebugMode::Phase;

int64_t calls(const CommDebugMode::Scope& s, Phase phase, const std::string& kind) {
  auto p = s.by_phase.find(phase);
  if (p == s.by_phase.end()) return 0;
  auto k = p->second.find(kind);
  return k == p->second.end() ? 0 : k->second.calls;
}

TEST(CommDebugMode, TensorParallelGptPerModule) {
  op_test::on_mesh({2}, [](const DeviceMesh& tp) {
    nn::GptConfig c;
    c.vocab = 24, c.dim = 16, c.layers = 2, c.heads = 4, c.hidden = 32;
    auto m = std::make_shared<nn::Gpt>(c);
    nn::parallelize_module(m, tp, nn::gpt_tp_plan(c));
    m->materialize(tp, 1);
    const Tensor ids = Tensor::rand({2, 6}, 3, DType::i64, 0, 24), tgt = Tensor::rand({2, 6}, 4, DType::i64, 0, 24);
    CommDebugMode mode;
    CommCounter counter(tp);
    {
      nn::ModuleTracking tracked = nn::track_modules(mode, *m);
      Variable logits = (*m)(Variable(nn_test::replicate_on(ids, tp)));
      Variable loss = nn::cross_entropy(logits, nn_test::replicate_on(tgt, tp), -100, LossReduction::kSum);
      loss.backward();
    }
    // Global equals the counter, kind by kind, calls and bytes.
    EXPECT_EQ(mode.total(), counter.total());
    for (CollectiveKind k : {CollectiveKind::kAllReduce, CollectiveKind::kAllGather, CollectiveKind::kReduceScatter}) {
      EXPECT_EQ(mode.count(k), counter.count(k)) << collective_kind_name(k);
      EXPECT_EQ(mode.bytes(k), counter.bytes(k)) << collective_kind_name(k);
    }
    std::map<std::string, CommDebugMode::Scope> by;
    for (const auto& s : mode.scopes()) by[s.name] = s;
    ASSERT_TRUE(by.count("Gpt") && by.count("layers.1.feed_forward"));
    EXPECT_EQ(by["Gpt"].depth, 1);
    EXPECT_EQ(by["layers"].depth, 2);
    EXPECT_EQ(by["layers.0.attention"].depth, 4);
    for (int l = 0; l < 2; ++l) {
      const std::string b = "layers." + std::to_string(l);
      // Megatron: the row-parallel output projection all-reduces forward. Backward, the column-parallel
      // projections' input gradient is a partial sum, reduced where it is consumed: in the norm's backward before
      // them (a DTensor stays Partial until an op needs it whole).
      for (const std::string sub : {".attention", ".feed_forward"}) {
        EXPECT_EQ(calls(by[b + sub], Phase::kForward, "all_reduce"), 1) << b + sub;
        EXPECT_EQ(calls(by[b + sub], Phase::kBackward, "all_reduce"), 0) << b + sub;
      }
      EXPECT_EQ(calls(by[b + ".attention.wo"], Phase::kForward, "all_reduce"), 1) << b;
      for (const std::string norm : {".attention_norm", ".ffn_norm"}) {
        EXPECT_EQ(calls(by[b + norm], Phase::kForward, "all_reduce"), 0) << b + norm;
        EXPECT_EQ(calls(by[b + norm], Phase::kBackward, "all_reduce"), 1) << b + norm;
      }
      EXPECT_EQ(calls(by[b], Phase::kForward, "all_reduce"), 2) << b;
      EXPECT_EQ(calls(by[b], Phase::kBackward, "all_reduce"), 2) << b;
    }
    // The root holds every call made inside the model; the loss's (outside every module) count under Global only.
    const int64_t inside =
        calls(by["Gpt"], Phase::kForward, "all_reduce") + calls(by["Gpt"], Phase::kBackward, "all_reduce");
    const int64_t outside = calls(mode.scopes()[0], Phase::kOutside, "all_reduce");
    EXPECT_GT(outside, 0) << "loss parallel's reductions run outside the model";
    EXPECT_EQ(inside + outside, mode.count(CollectiveKind::kAllReduce));
    // Text and JSON.
    const std::string text = mode.to_text();
    EXPECT_NE(text.find("Global\n"), std::string::npos);
    EXPECT_NE(text.find("\n        layers.0.attention\n          forward\n            all_reduce: 1 ("),
              std::string::npos)
        << text;
    const boost::json::value j = boost::json::parse(mode.to_json());
    const auto& scopes = j.at("scopes").as_array();
    EXPECT_EQ(scopes.size(), mode.scopes().size());
    EXPECT_EQ(scopes[0].at("name"), "Global");
    for (const auto& s : scopes)
      if (s.at("name") == "layers.1.attention_norm") {
        EXPECT_EQ(s.at("backward").at("all_reduce").at("calls").as_int64(), 1);
      }
  });
}

TEST(CommDebugMode, ScopesByHandAndErrors) {
  op_test::on_mesh({2}, [](const DeviceMesh& mesh) {
    CommDebugMode mode;
    Tensor t = Tensor::ones({8});
    mode.enter("outer", Phase::kForward);
    mesh.comm(0)->all_reduce(t, ReduceOp::kSum)->wait();
    mode.enter("inner", Phase::kForward);
    Tensor gathered = Tensor::empty({4});
    mesh.comm(0)->all_gather(Tensor::ones({2}), gathered)->wait();
    mode.exit("inner", Phase::kForward);
    mode.exit("outer", Phase::kForward);
    mesh.comm(0)->all_reduce(t, ReduceOp::kSum)->wait();
    const auto s = mode.scopes();
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(calls(s[1], Phase::kForward, "all_reduce"), 1);
    EXPECT_EQ(calls(s[1], Phase::kForward, "all_gather"), 1);
    EXPECT_EQ(calls(s[2], Phase::kForward, "all_gather"), 1);
    EXPECT_EQ(calls(s[2], Phase::kForward, "all_reduce"), 0);
    EXPECT_EQ(calls(s[0], Phase::kOutside, "all_reduce"), 1);
    EXPECT_EQ(mode.bytes(CollectiveKind::kAllReduce), 2 * 8 * 4);
    EXPECT_THROW(mode.exit("outer", Phase::kForward), InvalidArgument);
    EXPECT_THROW(mode.exit("never", Phase::kForward), InvalidArgument);
    EXPECT_THROW(mode.declare("Global", 0), InvalidArgument);
    mode.reset();
    EXPECT_EQ(mode.total(), 0);
    EXPECT_EQ(mode.to_text(), "no collectives\n");
  });
}

}  // namespace
}  // namespace dt
