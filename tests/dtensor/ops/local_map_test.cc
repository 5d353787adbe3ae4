// Extension points: local_map (a function of local Tensors as a function of DTensors) and register_op_rule (a user
// op with its own sharding strategies, called through dispatch).
#include <gtest/gtest.h>

#include <thread>

#include "dtensor/comm_counter.h"
#include "dtensor/ops/rule_util.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/matmul.h"
#include "kernels/ops/reduction.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

TEST(DTensorLocalMap, RowwiseMatmulAndPartialSum) {
  for (const auto& mesh_shape : std::vector<std::vector<int64_t>>{{2}, {3}}) {
    op_test::on_mesh(mesh_shape, [](const DeviceMesh& mesh) {
      const Tensor xf = Tensor::rand({5, 3}, 1, DType::f32, -1, 1), wf = Tensor::rand({3, 4}, 2, DType::f32, -1, 1);
      // x arrives Replicate: local_map slices it to S(0) (local), w stays R; the output shape [5, 4] is inferred
      // from uneven blocks (5 rows on 2 or 3 ranks).
      DTensor x = distribute_tensor(xf, mesh, {Replicate{}}, {}, std::nullopt);
      DTensor w = distribute_tensor(wf, mesh, {Replicate{}}, {}, std::nullopt);
      DTensorFn mm =
          local_map([](const std::vector<Tensor>& l) { return std::vector<Tensor>{kernels::matmul(l[0], l[1])}; },
                    {{Shard{0}}, {Replicate{}}}, {{Shard{0}}});
      DTensor y = mm({x, w})[0];
      EXPECT_EQ(y.shape(), (Shape{5, 4}));
      EXPECT_TRUE(y.placements()[0] == Placement(Shard{0}));
      EXPECT_TRUE(allclose(y.full_tensor(), kernels::matmul(xf, wf)));
      // A local partial sum over a sharded dim, declared P(sum), with the shape given.
      DTensor xs = distribute_tensor(xf, mesh, {Shard{1}}, {}, std::nullopt);
      LocalMapOptions o;
      o.out_shapes = {Shape{5}};
      DTensorFn rowsum =
          local_map([](const std::vector<Tensor>& l) { return std::vector<Tensor>{kernels::sum(l[0], {1})}; },
                    {{Shard{1}}}, {{Partial{ReduceOp::kSum}}}, o);
      DTensor s = rowsum({xs})[0];
      EXPECT_TRUE(allclose(s.full_tensor(), kernels::sum(xf, {1})));
      // Without redistribution, a mismatching input is an error; an empty entry takes the input as it is.
      o.redistribute_inputs = false;
      DTensorFn strict = local_map([](const std::vector<Tensor>& l) { return l; }, {{Shard{1}}}, {{Shard{1}}}, o);
      EXPECT_THROW(strict({x}), InvalidArgument);
      DTensorFn as_is = local_map([](const std::vector<Tensor>& l) { return l; }, {{}}, {{Shard{1}}});
      EXPECT_TRUE(equal(as_is({xs})[0].full_tensor(), xf));
      EXPECT_THROW(mm({x}), InvalidArgument);  // one input for two in_placements
    });
  }
}

// A user op: out = a + scale * b, elementwise on equal shapes; linear, so P(sum) operands give P(sum).
ops::OpRule scaled_add_rule(const std::string& name) {
  using namespace ops::detail;
  ops::OpRule r;
  r.name = name;
  r.input_names = {"a", "b"};
  r.meta = [](const ops::OpSchema& s) {
    DT_CHECK_ARG(s.inputs[0].shape == s.inputs[1].shape, "scaled_add: shapes differ");
    return std::vector<ops::OutputMeta>{{s.inputs[0].shape, s.inputs[0].dtype}};
  };
  r.strategies = [](const ops::OpSchema& s, const std::vector<ops::OutputMeta>&) {
    std::vector<ops::DimStrategy> v{replicate_all(2, 1)};
    for (int64_t d = 0; d < s.inputs[0].ndim(); ++d) v.push_back(strategy({S(d)}, {S(d), S(d)}));
    v.push_back(strategy({P()}, {P(), P()}));
    return v;
  };
  r.compute = [](const ops::OpCall& c, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{kernels::add(in[0], kernels::mul_scalar(in[1], c.params().get_double("scale")))};
  };
  return r;
}

TEST(DTensorRegisterOpRule, UserOpUsesItsStrategies) {
  static const ops::OpId id = ops::register_op_rule(scaled_add_rule("test_scaled_add"));
  EXPECT_EQ(ops::op_id("test_scaled_add"), id);
  op_test::Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      const ops::OpParams params = ops::OpParams().set("scale", 0.5);
      op_test::run_matrix(
          "scaled_add", mesh,
          {op_test::InputGen({5, 3}, DType::f32, -2, 2, {ReduceOp::kSum}),
           op_test::InputGen({5, 3}, DType::f32, -2, 2, {ReduceOp::kSum})},
          [&](const std::vector<DTensor>& x) { return ops::dispatch("test_scaled_add", x, params); },
          [](const std::vector<Tensor>& x) {
            return std::vector<Tensor>{kernels::add(x[0], kernels::mul_scalar(x[1], 0.5))};
          },
          false, failures, "test_scaled_add", params);
    });
  }
  failures.report(100);
  op_test::on_mesh({2}, [](const DeviceMesh& mesh) {
    DTensor a = distribute_tensor(Tensor::rand({5, 3}, 1), mesh, {Partial{ReduceOp::kSum}}, {}, std::nullopt);
    DTensor b = distribute_tensor(Tensor::rand({5, 3}, 2), mesh, {Partial{ReduceOp::kSum}}, {}, std::nullopt);
    CommCounter counter(mesh);
    DTensor y = ops::dispatch_one("test_scaled_add", {a, b}, ops::OpParams().set("scale", 2.0));
    EXPECT_TRUE(y.placements()[0] == Placement(Partial{ReduceOp::kSum})) << y.describe();
    EXPECT_EQ(counter.total(), 0) << counter.summary();
  });
}

TEST(DTensorRegisterOpRule, RefusesDuplicatesAndIncompleteRules) {
  static const ops::OpId id = ops::register_op_rule(scaled_add_rule("test_scaled_add_dup"));
  (void)id;
  EXPECT_THROW(ops::register_op_rule(scaled_add_rule("test_scaled_add_dup")), InvalidArgument);
  EXPECT_THROW(ops::register_op_rule(scaled_add_rule("add")), InvalidArgument);
  ops::OpRule incomplete = scaled_add_rule("test_incomplete");
  incomplete.compute = nullptr;
  EXPECT_THROW(ops::register_op_rule(incomplete), InvalidArgument);
  EXPECT_THROW(ops::register_op_rule(scaled_add_rule("")), InvalidArgument);
}

TEST(DTensorRegisterOpRule, ConcurrentRegistrationsAndLookups) {
  static std::atomic<int> round{0};
  const int r = round++;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string name = "test_concurrent_" + std::to_string(r) + "_" + std::to_string(t);
      const ops::OpId id = ops::register_op_rule(scaled_add_rule(name));
      for (int k = 0; k < 200; ++k) {
        if (ops::op_id(name) != id || ops::rule_of(id).name != name || ops::find_rule("mul").name != "mul") ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const std::vector<std::string> all = ops::registered_ops();
  EXPECT_NE(std::find(all.begin(), all.end(), "test_concurrent_" + std::to_string(r) + "_3"), all.end());
}

}  // namespace
}  // namespace dt
