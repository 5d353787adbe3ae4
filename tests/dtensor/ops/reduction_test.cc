// Reductions against kernels/ops/reduction.h on full tensors for every combination of placements, including
// uneven and empty shards (2 rows over 3 ranks) and Partial inputs of every relevant op.
#include "kernels/ops/reduction.h"

#include <gtest/gtest.h>

#include "dtensor/comm_counter.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using op_test::Failures;
using op_test::InputGen;

const std::vector<ReduceOp> kPartials{ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

TEST(DTensorOpsReduction, SumMeanAmaxAminEveryPlacement) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    const std::vector<Shape> shapes =
        mesh_shape.size() == 1 ? std::vector<Shape>{{5, 3}, {2, 4}, {6, 2}} : std::vector<Shape>{{5, 3}};
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const Shape& shape : shapes) {
        for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{}, {0}, {-1}, {0, 1}}) {
          for (bool keepdim : {false, true}) {
            if (mesh.ndim() == 2 && keepdim && !dims.empty()) continue;
            const std::string suffix = " dims " + shape_str(dims) + (keepdim ? " keepdim" : "");
            using KFn = Tensor (*)(const Tensor&, const std::vector<int64_t>&, bool, Stream);
            using DFn = DTensor (*)(const DTensor&, const std::vector<int64_t>&, bool);
            const std::vector<std::tuple<const char*, DFn, KFn>> ops{{"sum", &dt::sum, &kernels::sum},
                                                                     {"mean", &dt::mean, &kernels::mean},
                                                                     {"amax", &dt::amax, &kernels::amax},
                                                                     {"amin", &dt::amin, &kernels::amin}};
            for (const auto& [name, dfn, kfn] : ops) {
              op_test::run_matrix(
                  name + suffix, mesh, {InputGen(shape, DType::f32, -2, 2, kPartials)},
                  [&](const std::vector<DTensor>& x) { return std::vector<DTensor>{dfn(x[0], dims, keepdim)}; },
                  [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{kfn(x[0], dims, keepdim, {})}; },
                  false, failures);
            }
          }
        }
      }
    });
  }
  failures.report(5000);
}

TEST(DTensorOpsReduction, IntegerSumAndThreeDims) {
  Failures failures;
  op_test::on_mesh({3}, [&](const DeviceMesh& mesh) {
    op_test::run_matrix(
        "sum i32", mesh, {InputGen({4, 5}, DType::i32, -5, 5, {ReduceOp::kSum})},
        [](const std::vector<DTensor>& x) { return std::vector<DTensor>{sum(x[0], {1})}; },
        [](const std::vector<Tensor>& x) { return std::vector<Tensor>{kernels::sum(x[0], {1})}; }, true, failures);
    op_test::run_matrix(
        "mean 3-d", mesh, {InputGen({2, 5, 3}, DType::f32, -2, 2, {ReduceOp::kSum})},
        [](const std::vector<DTensor>& x) {
          return std::vector<DTensor>{mean(x[0], {0, 2})};
        },
        [](const std::vector<Tensor>& x) {
          return std::vector<Tensor>{kernels::mean(x[0], {0, 2})};
        },
        false, failures);
    op_test::run_matrix(
        "mean bf16", mesh, {InputGen({5, 3}, DType::bf16, -2, 2, {ReduceOp::kSum})},
        [](const std::vector<DTensor>& x) { return std::vector<DTensor>{mean(x[0], {0})}; },
        [](const std::vector<Tensor>& x) { return std::vector<Tensor>{kernels::mean(x[0], {0})}; }, false, failures);
  });
  failures.report(25);
}

// Note [exact mean]: 5 rows over 2 ranks are blocks of 3 and 2; the mean is a P(sum) of local sums / 5 (no
// communication), not the average of the blocks' means (which gives (m0 + m1) / 2, wrong here).
TEST(DTensorOpsReduction, MeanOverUnevenShardsIsExactAndLocal) {
  Tensor full = Tensor::from_vector({1, 2, 3, 4, 100}, {5});
  std::vector<double> got(2, 0);
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    DTensor x = distribute_tensor(full, mesh, {Shard{0}});
    CommCounter counter(mesh);
    DTensor m = mean(x);
    EXPECT_EQ(counter.total(), 0);
    EXPECT_TRUE(m.placements()[0] == Placement(Partial{ReduceOp::kSum})) << m.describe();
    got[size_t(mesh.global_rank())] = m.full_tensor().item();
  });
  EXPECT_DOUBLE_EQ(got[0], 22.0);  // (1+2+3+4+100)/5; the average of the blocks' means would be 27.5
  EXPECT_DOUBLE_EQ(got[1], 22.0);
}

TEST(DTensorOpsReduction, MaxMinWithIndicesAndArgmax) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    const Shape shape = mesh_shape.size() == 1 ? Shape{5, 3} : Shape{3, 5};
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (int64_t dim : {0, 1}) {
        for (bool keepdim : {false, true}) {
          const std::string suffix = " dim " + std::to_string(dim) + (keepdim ? " keepdim" : "");
          InputGen g(shape, DType::f32, -2, 2, {ReduceOp::kMax});
          op_test::run_matrix(
              "max" + suffix, mesh, {g},
              [&](const std::vector<DTensor>& x) {
                DValuesIndices r = max(x[0], dim, keepdim);
                return std::vector<DTensor>{r.values, r.indices};
              },
              [&](const std::vector<Tensor>& x) {
                kernels::ValuesIndices r = kernels::max(x[0], dim, keepdim);
                return std::vector<Tensor>{r.values, r.indices};
              },
              true, failures);
          op_test::run_matrix(
              "min" + suffix, mesh, {g},
              [&](const std::vector<DTensor>& x) {
                DValuesIndices r = min(x[0], dim, keepdim);
                return std::vector<DTensor>{r.values, r.indices};
              },
              [&](const std::vector<Tensor>& x) {
                kernels::ValuesIndices r = kernels::min(x[0], dim, keepdim);
                return std::vector<Tensor>{r.values, r.indices};
              },
              true, failures);
          op_test::run_matrix(
              "argmax" + suffix, mesh, {g},
              [&](const std::vector<DTensor>& x) { return std::vector<DTensor>{argmax(x[0], dim, keepdim)}; },
              [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{kernels::argmax(x[0], dim, keepdim)}; },
              true, failures);
        }
      }
      InputGen g(shape, DType::f32, -2, 2, {ReduceOp::kMax, ReduceOp::kMin});
      op_test::run_matrix(
          "argmin flat, max(x), min(x)", mesh, {g},
          [](const std::vector<DTensor>& x) {
            return std::vector<DTensor>{argmin(x[0]), max(x[0]), min(x[0])};
          },
          [](const std::vector<Tensor>& x) {
            return std::vector<Tensor>{kernels::argmin(x[0]), kernels::max(x[0]), kernels::min(x[0])};
          },
          true, failures);
    });
  }
  failures.report(1000);
}

TEST(DTensorOpsReduction, EmptyReductionIsAnError) {
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    DTensor x = distribute_tensor(Tensor::zeros({0, 3}), mesh, {Shard{1}});
    EXPECT_THROW(amax(x, {0}), InvalidArgument);
    DTensor s = sum(x, {0});  // sum over an empty dim is 0
    EXPECT_TRUE(equal(s.full_tensor(), Tensor::zeros({3})));
  });
}

}  // namespace
}  // namespace dt
