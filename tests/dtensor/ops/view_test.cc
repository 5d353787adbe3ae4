// Views and data movement: bit-exact against the same op on full tensors for every combination of placements,
// including reshapes whose chunks do not line up (pytorch/pytorch#179502: they must redistribute, never produce a
// silently wrong layout).
#include <gtest/gtest.h>

#include <numeric>

#include "kernels/ops/shape_ops.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using op_test::Failures;
using op_test::InputGen;

const std::vector<ReduceOp> kSum{ReduceOp::kSum};

TEST(DTensorOpsView, ReshapeEveryPlacement) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    std::vector<std::pair<Shape, Shape>> cases{
        {{4, 6}, {24}}, {{8, 3}, {2, 4, 3}}, {{5, 2}, {10}}, {{2, 3, 4}, {6, 4}}};
    if (mesh_shape.size() == 1)
      cases.insert(cases.end(), {{{6, 4}, {3, 2, 4}},
                                 {{4, 6}, {4, 2, 3}},
                                 {{24}, {4, 6}},
                                 {{1, 6}, {6, 1}},
                                 {{3, 1, 4}, {3, 4}},
                                 {{6, 4}, {2, 12}},
                                 {{0, 4}, {4, 0}},
                                 {{5}, {5, 1}}});
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const auto& [from, to] : cases) {
        const Shape target = to;
        op_test::run_matrix(
            "reshape " + shape_str(from) + " -> " + shape_str(to), mesh, {InputGen(from, DType::f32, -2, 2, kSum)},
            [&](const std::vector<DTensor>& x) { return std::vector<DTensor>{reshape(x[0], target)}; },
            [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].reshape(target).contiguous()}; }, true,
            failures, "reshape", ops::OpParams().set("shape", target));
      }
    });
  }
  failures.report(450);
}

TEST(DTensorOpsView, ReshapeKeepsShardOnlyWhenChunksLineUp) {
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    // [6, 4] rows 0-2 / 3-5 are elements 0-11 / 12-23 = the chunks of [24]: the Shard survives.
    DTensor a = distribute_tensor(Tensor::arange(24).reshape({6, 4}), mesh, {Shard{0}});
    EXPECT_TRUE(ops::explain("reshape", {a}, ops::OpParams().set("shape", Shape{24})).direct());
    EXPECT_TRUE(reshape(a, {24}).placements()[0] == Placement(Shard{0}));
    // [5, 2] rows 0-2 / 3-4 are elements 0-5 / 6-9 but [10] chunks are 0-4 / 5-9: redistributed, still exact.
    DTensor b = distribute_tensor(Tensor::arange(10).reshape({5, 2}), mesh, {Shard{0}});
    EXPECT_FALSE(ops::explain("reshape", {b}, ops::OpParams().set("shape", Shape{10})).direct());
    DTensor r = reshape(b, {10});
    EXPECT_TRUE(equal(r.full_tensor(), Tensor::arange(10)));
    // A shard of a non-leading dim of a merged group cannot stay.
    DTensor c = distribute_tensor(Tensor::arange(24).reshape({4, 6}), mesh, {Shard{1}});
    EXPECT_TRUE(equal(reshape(c, {24}).full_tensor(), Tensor::arange(24)));
    // Splitting a sharded dim: [4, 6] S(1) -> [4, 2, 3] keeps S(1).
    DTensor d = reshape(c, {4, 2, 3});
    EXPECT_TRUE(d.placements()[0] == Placement(Shard{1})) << d.describe();
    EXPECT_TRUE(equal(d.full_tensor(), Tensor::arange(24).reshape({4, 2, 3})));
  });
}

TEST(DTensorOpsView, PermuteSqueezeNarrowTril) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      InputGen g3({2, 5, 3}, DType::f32, -2, 2, kSum);
      auto run = [&](const std::string& name, std::function<DTensor(const DTensor&)> d,
                     std::function<Tensor(const Tensor&)> r, InputGen g) {
        op_test::run_matrix(
            name, mesh, {g}, [&](const std::vector<DTensor>& x) { return std::vector<DTensor>{d(x[0])}; },
            [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{r(x[0]).contiguous()}; }, true, failures);
      };
      run(
          "transpose", [](const DTensor& x) { return transpose(x, 0, 2); },
          [](const Tensor& x) { return x.transpose(0, 2); }, g3);
      run(
          "permute",
          [](const DTensor& x) {
            return permute(x, {1, 2, 0});
          },
          [](const Tensor& x) {
            return x.permute({1, 2, 0});
          },
          g3);
      run(
          "unsqueeze", [](const DTensor& x) { return unsqueeze(x, 1); }, [](const Tensor& x) { return x.unsqueeze(1); },
          g3);
      run(
          "narrow", [](const DTensor& x) { return narrow(x, 1, 1, 3); },
          [](const Tensor& x) { return x.narrow(1, 1, 3); }, g3);
      run(
          "flatten", [](const DTensor& x) { return flatten(x, 1); },
          [](const Tensor& x) {
            return x.reshape({2, 15});
          },
          g3);
      run(
          "unflatten",
          [](const DTensor& x) {
            return unflatten(x, 1, {5, 1});
          },
          [](const Tensor& x) {
            return x.reshape({2, 5, 1, 3});
          },
          g3);
      run(
          "view",
          [](const DTensor& x) {
            return view(x, {2, -1});
          },
          [](const Tensor& x) {
            return x.reshape({2, 15});
          },
          g3);
      InputGen g1({3, 1, 4}, DType::f32, -2, 2, kSum);
      run(
          "squeeze dim", [](const DTensor& x) { return squeeze(x, 1); }, [](const Tensor& x) { return x.squeeze(1); },
          g1);
      run(
          "squeeze all", [](const DTensor& x) { return squeeze(x); }, [](const Tensor& x) { return x.squeeze(); }, g1);
      for (int64_t diag : {0, -1, 2}) {
        run(
            "tril " + std::to_string(diag), [diag](const DTensor& x) { return tril(x, diag); },
            [diag](const Tensor& x) { return kernels::tril(x, diag); }, InputGen({5, 6}, DType::f32, -2, 2, kSum));
        run(
            "triu " + std::to_string(diag), [diag](const DTensor& x) { return triu(x, diag); },
            [diag](const Tensor& x) { return kernels::triu(x, diag); }, g3);
      }
    });
  }
  failures.report(1300);
}

TEST(DTensorOpsView, CatAndSplit) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (int64_t dim : {0, 1}) {
        Shape sa{3, 4}, sb{3, 4};
        sb[size_t(dim)] = 2;
        op_test::run_matrix(
            "cat dim " + std::to_string(dim), mesh,
            {InputGen(sa, DType::f32, -2, 2, kSum), InputGen(sb, DType::f32, -2, 2, kSum)},
            [dim](const std::vector<DTensor>& x) {
              return std::vector<DTensor>{cat({x[0], x[1]}, dim)};
            },
            [dim](const std::vector<Tensor>& x) {
              return std::vector<Tensor>{kernels::cat({x[0], x[1]}, dim)};
            },
            true, failures);
        op_test::run_matrix(
            "split dim " + std::to_string(dim), mesh, {InputGen({5, 6}, DType::f32, -2, 2, kSum)},
            [dim](const std::vector<DTensor>& x) {
              return split(x[0], std::vector<int64_t>{1, 0, 4 + dim}, dim);
            },
            [dim](const std::vector<Tensor>& x) {
              std::vector<Tensor> out;
              for (const Tensor& t : x[0].split_with_sizes({1, 0, 4 + dim}, dim)) out.push_back(t.contiguous());
              return out;
            },
            true, failures);
      }
    });
  }
  failures.report(2400);
}

}  // namespace
}  // namespace dt
