// Sharding propagation without running anything (pure): which strategy each op picks for canonical placements.
#include <gtest/gtest.h>

#include <algorithm>

#include "dtensor/ops.h"
#include "placement/planner.h"

namespace dt {
namespace {

using ops::OpSchema;
using ops::Propagation;
using ops::TensorMeta;

TensorMeta meta(Shape shape, std::string spec, DType dtype = DType::f32) {
  TensorMeta t;
  t.shape = shape;
  t.dtype = dtype;
  t.spec = ShardingSpec::parse(spec, int64_t(shape.size()));
  return t;
}

Propagation run(const std::string& op, MeshShape mesh, std::vector<TensorMeta> inputs, ops::OpParams params = {}) {
  OpSchema s(op, std::move(mesh));
  s.inputs = std::move(inputs);
  s.params = params;
  return ops::propagate(s);
}

TEST(DTensorOpsStrategy, MatmulPicksTheDirectStrategy) {
  MeshShape m({4});
  EXPECT_EQ(run("matmul", m, {meta({8, 6}, "S(0)"), meta({6, 4}, "R")}).chosen.to_string(), "S(0) x R -> S(0)");
  EXPECT_EQ(run("matmul", m, {meta({8, 6}, "R"), meta({6, 4}, "S(1)")}).chosen.to_string(), "R x S(1) -> S(1)");
  EXPECT_EQ(run("matmul", m, {meta({8, 6}, "S(1)"), meta({6, 4}, "S(0)")}).chosen.to_string(), "S(1) x S(0) -> P(sum)");
  EXPECT_EQ(run("matmul", m, {meta({8, 6}, "P(sum)"), meta({6, 4}, "R")}).chosen.to_string(), "P(sum) x R -> P(sum)");
  EXPECT_EQ(run("matmul", m, {meta({3, 8, 6}, "S(0)"), meta({3, 6, 4}, "S(0)")}).chosen.to_string(),
            "S(0) x S(0) -> S(0)");
  Propagation p = run("matmul", m, {meta({8, 6}, "S(1)"), meta({6, 4}, "S(1)")});  // no direct rule
  EXPECT_FALSE(p.direct());
  EXPECT_GT(p.chosen.cost(), 0);
}

TEST(DTensorOpsStrategy, LinearColumnAndRowParallel) {
  MeshShape m({2});
  Propagation col = run("linear", m, {meta({4, 8}, "R"), meta({6, 8}, "S(0)"), meta({6}, "R")});
  EXPECT_EQ(col.chosen.to_string(), "R x S(0) x S(0) -> S(1)");
  ASSERT_EQ(col.redistributed_inputs, std::vector<size_t>{2});  // the bias is sliced locally
  Propagation row = run("linear", m, {meta({4, 6}, "S(1)"), meta({8, 6}, "S(1)"), meta({8}, "R")});
  EXPECT_EQ(row.chosen.to_string(), "S(1) x S(1) x P(sum) -> P(sum)");  // bias added once (coordinate 0)
  const Plan& plan = plan_redistribution(m, {8}, 4, ShardingSpec::parse("R"), ShardingSpec::parse("P(sum)"));
  for (const PlanStep& s : plan.steps) EXPECT_FALSE(is_collective(s.kind));
}

TEST(DTensorOpsStrategy, NestedShardOrderIsKept) {
  MeshShape m({2, 2});
  Propagation p = run("add", m, {meta({8, 3}, "S(0)[1],S(0)[0]"), meta({8, 3}, "S(0)[1],S(0)[0]")});
  EXPECT_TRUE(p.direct());
  EXPECT_EQ(p.chosen.outputs[0].to_string(), "S(0)[1],S(0)[0]");
  Propagation q = run("exp", m, {meta({8, 3}, "S(0),S(0)")});
  EXPECT_TRUE(q.direct());
  EXPECT_EQ(q.chosen.outputs[0].to_string(), "S(0),S(0)");
}

TEST(DTensorOpsStrategy, PartialRulesAreExactlyTheLinearOnes) {
  MeshShape m({2});
  EXPECT_TRUE(run("add", m, {meta({4}, "P(sum)"), meta({4}, "P(sum)")}).direct());
  EXPECT_TRUE(run("mul", m, {meta({4}, "P(sum)"), meta({4}, "R")}).direct());
  EXPECT_FALSE(run("mul", m, {meta({4}, "P(sum)"), meta({4}, "P(sum)")}).direct());  // not bilinear-safe
  EXPECT_FALSE(run("exp", m, {meta({4}, "P(sum)")}).direct());
  EXPECT_EQ(run("exp", m, {meta({4}, "P(max)")}).chosen.to_string(), "P(max) -> P(max)");
  EXPECT_EQ(run("neg", m, {meta({4}, "P(max)")}).chosen.to_string(), "P(max) -> P(min)");
  EXPECT_FALSE(run("log", m, {meta({4}, "P(max)")}).direct());   // log is not defined everywhere
  EXPECT_FALSE(run("silu", m, {meta({4}, "P(max)")}).direct());  // not monotone
  ops::OpParams neg;
  neg.set("scalar", -2.0);
  EXPECT_EQ(run("mul_scalar", m, {meta({4}, "P(max)")}, neg).chosen.to_string(), "P(max) -> P(min)");
  ops::OpParams sum_all;
  sum_all.set("dims", std::vector<int64_t>{}).set("keepdim", false);
  EXPECT_EQ(run("sum", m, {meta({4, 3}, "S(0)")}, sum_all).chosen.to_string(), "S(0) -> P(sum)");
  EXPECT_EQ(run("amax", m, {meta({4, 3}, "S(1)")}, sum_all).chosen.to_string(), "S(1) -> P(max)");
  EXPECT_EQ(run("mean", m, {meta({5, 3}, "S(0)")}, sum_all).chosen.to_string(), "S(0) -> P(sum)");
}

TEST(DTensorOpsStrategy, ReshapeValidatesChunks) {
  ops::OpParams to24;
  to24.set("shape", Shape{24});
  EXPECT_TRUE(run("reshape", MeshShape({3}), {meta({6, 4}, "S(0)")}, to24).direct());
  EXPECT_TRUE(run("reshape", MeshShape({2, 2}), {meta({4, 6}, "S(0),S(0)")}, to24).direct());
  EXPECT_FALSE(run("reshape", MeshShape({4}), {meta({6, 4}, "S(0)")}, to24).direct());  // 2,2,2,0 rows vs 6-chunks
  ops::OpParams to10;
  to10.set("shape", Shape{10});
  Propagation p = run("reshape", MeshShape({2}), {meta({5, 2}, "S(0)")}, to10);
  EXPECT_FALSE(p.direct());
  EXPECT_EQ(p.chosen.to_string(), "R -> R");
}

TEST(DTensorOpsStrategy, LossParallelAndEmbedding) {
  MeshShape m({4});
  ops::OpParams p;
  p.set("ignore_index", int64_t(-100)).set("reduction", int64_t(LossReduction::kMean));
  EXPECT_EQ(run("cross_entropy", m, {meta({64, 1000}, "S(1)"), meta({64}, "R", DType::i64)}, p).chosen.to_string(),
            "S(1) x R -> R, R");  // the loss and every row's log-sum-exp
  EXPECT_EQ(run("cross_entropy", m, {meta({64, 1000}, "S(0)"), meta({64}, "S(0)", DType::i64)}, p).chosen.to_string(),
            "S(0) x S(0) -> P(sum), S(0)");
  EXPECT_EQ(run("embedding", m, {meta({2, 8}, "R", DType::i64), meta({100, 16}, "S(0)")}).chosen.to_string(),
            "R x S(0) -> P(sum)");
  EXPECT_EQ(run("embedding", m, {meta({2, 8}, "R", DType::i64), meta({100, 16}, "S(1)")}).chosen.to_string(),
            "R x S(1) -> S(2)");
}

TEST(DTensorOpsStrategy, ExpansionAndCache) {
  OpSchema s("abs", MeshShape({2, 2}));
  s.inputs = {meta({4, 4}, "R,R")};
  std::vector<ops::DimStrategy> dims = ops::find_rule("abs").strategies(s, {{{4, 4}, DType::f32}});
  EXPECT_EQ(dims.size(), 3u);  // R, S(0), S(1)
  // 3 x 3 combinations plus the reversed order for S(0),S(0) and S(1),S(1).
  EXPECT_EQ(ops::expand_strategies(s, {{{4, 4}, DType::f32}}, dims).size(), 11u);
  ops::clear_strategy_cache();
  ops::propagate(s);
  ops::propagate(s);
  EXPECT_EQ(ops::strategy_cache_stats().hits, 1);
  EXPECT_EQ(ops::strategy_cache_stats().misses, 1);
  std::vector<std::string> names = ops::registered_ops();
  for (const char* op : {"matmul", "linear", "add", "sum", "mean", "softmax", "layer_norm", "rms_norm", "embedding",
                         "cross_entropy", "reshape", "permute", "cat", "split", "tril"})
    EXPECT_NE(std::find(names.begin(), names.end(), op), names.end()) << op;
}

}  // namespace
}  // namespace dt
