// matmul and linear against kernels::matmul / kernels::linear on full tensors, for every combination of input
// placements (R, S of each dim, P(sum)) on [2], [3] and [2, 2]; 1-d operands, batch broadcasting, uneven and
// empty shards (a contracting dim of 2 over 3 ranks).
#include "kernels/ops/matmul.h"

#include <gtest/gtest.h>

#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using op_test::Failures;
using op_test::InputGen;

const std::vector<ReduceOp> kSum{ReduceOp::kSum};

TEST(DTensorOpsMatmul, EveryPlacement) {
  Failures failures;
  int64_t direct = 0, redistributed = 0;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    std::vector<std::pair<Shape, Shape>> shapes{{{5, 4}, {4, 3}}, {{2, 5, 4}, {4, 3}}};
    if (mesh_shape.size() == 1) {
      shapes.insert(shapes.end(), {{{6, 4}, {4, 6}},
                                   {{3, 2}, {2, 4}},  // k = 2: a rank of 3 holds an empty contracting block
                                   {{2, 5, 4}, {2, 4, 3}},
                                   {{1, 3, 4}, {2, 4, 2}},  // broadcast batch
                                   {{4}, {4}},
                                   {{5, 4}, {4}},
                                   {{4}, {4, 3}},
                                   {{4}, {2, 4, 3}}});
    }
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const auto& [sa, sb] : shapes) {
        op_test::MatrixStats st = op_test::run_matrix(
            "matmul", mesh, {InputGen(sa, DType::f32, -2, 2, kSum), InputGen(sb, DType::f32, -2, 2, kSum)},
            [](const std::vector<DTensor>& x) { return std::vector<DTensor>{matmul(x[0], x[1])}; },
            [](const std::vector<Tensor>& x) { return std::vector<Tensor>{kernels::matmul(x[0], x[1])}; }, false,
            failures, "matmul");
        if (mesh.global_rank() == 0) direct += st.direct, redistributed += st.redistributed;
      }
    });
  }
  failures.report(3500);
  EXPECT_GT(direct, 100);
  EXPECT_GT(redistributed, 100);  // e.g. S(1) @ S(1) has no direct rule
}

TEST(DTensorOpsMatmul, LinearEveryPlacement) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    struct Case {
      Shape x, w;
      bool bias;
    };
    std::vector<Case> cases{{{5, 4}, {3, 4}, true}, {{2, 3, 4}, {6, 4}, false}};
    if (mesh_shape.size() == 1) cases.insert(cases.end(), {{{6, 4}, {6, 4}, true}, {{4}, {5, 4}, true}});
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const Case& c : cases) {
        std::vector<InputGen> in{InputGen(c.x, DType::f32, -2, 2, kSum), InputGen(c.w, DType::f32, -2, 2, kSum)};
        if (c.bias) in.push_back(InputGen({c.w[0]}, DType::f32, -2, 2, kSum));
        op_test::run_matrix(
            c.bias ? "linear+bias" : "linear", mesh, in,
            [](const std::vector<DTensor>& x) {
              return std::vector<DTensor>{linear(x[0], x[1], x.size() > 2 ? x[2] : DTensor())};
            },
            [](const std::vector<Tensor>& x) {
              return std::vector<Tensor>{kernels::linear(x[0], x[1], x.size() > 2 ? x[2] : Tensor())};
            },
            false, failures);
      }
    });
  }
  failures.report(12000);
}

TEST(DTensorOpsMatmul, OtherDtypes) {
  Failures failures;
  op_test::on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    for (DType dt : {DType::f64, DType::bf16}) {
      op_test::run_matrix(
          std::string("matmul ") + dtype_name(dt), mesh,
          {InputGen({3, 5}, dt, -2, 2, kSum), InputGen({5, 3}, dt, -2, 2, {})},
          [](const std::vector<DTensor>& x) { return std::vector<DTensor>{matmul(x[0], x[1])}; },
          [](const std::vector<Tensor>& x) { return std::vector<Tensor>{kernels::matmul(x[0], x[1])}; }, false,
          failures);
    }
  });
  failures.report(1200);
}

}  // namespace
}  // namespace dt
