// Elementwise DTensor ops against the same kernels on full tensors, for every combination of input placements
// (Replicate, Shard of each dim, the Partial ops that matter) on meshes [2], [3] and [2, 2].
#include "kernels/ops/elementwise.h"

#include <gtest/gtest.h>

#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using kernels::UnaryOp;
using op_test::Failures;
using op_test::InputGen;

const std::vector<ReduceOp> kSumMaxMin{ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};

struct UnaryCase {
  const char* name;
  std::function<DTensor(const DTensor&)> dist;
  std::function<Tensor(const Tensor&)> ref;
  double lo = -2, hi = 2;
};

std::vector<UnaryCase> unary_cases() {
  auto k = [](UnaryOp op, double s = 0) { return [op, s](const Tensor& x) { return kernels::unary(op, x, s); }; };
  return {
      {"neg", [](const DTensor& x) { return neg(x); }, k(UnaryOp::kNeg)},
      {"abs", [](const DTensor& x) { return abs(x); }, k(UnaryOp::kAbs)},
      {"relu", [](const DTensor& x) { return relu(x); }, k(UnaryOp::kRelu)},
      {"exp", [](const DTensor& x) { return exp(x); }, k(UnaryOp::kExp)},
      {"log", [](const DTensor& x) { return log(x); }, k(UnaryOp::kLog), 0.5, 2},
      {"sqrt", [](const DTensor& x) { return sqrt(x); }, k(UnaryOp::kSqrt), 0.5, 2},
      {"rsqrt", [](const DTensor& x) { return rsqrt(x); }, k(UnaryOp::kRsqrt), 0.5, 2},
      {"tanh", [](const DTensor& x) { return tanh(x); }, k(UnaryOp::kTanh)},
      {"sigmoid", [](const DTensor& x) { return sigmoid(x); }, k(UnaryOp::kSigmoid)},
      {"silu", [](const DTensor& x) { return silu(x); }, k(UnaryOp::kSilu)},
      {"gelu", [](const DTensor& x) { return gelu(x); }, k(UnaryOp::kGeluErf)},
      {"gelu_tanh", [](const DTensor& x) { return gelu(x, GeluApprox::kTanh); }, k(UnaryOp::kGeluTanh)},
      {"x+1.5", [](const DTensor& x) { return x + 1.5; }, k(UnaryOp::kAddScalar, 1.5)},
      {"x-1.5", [](const DTensor& x) { return x - 1.5; }, k(UnaryOp::kSubScalar, 1.5)},
      {"1.5-x", [](const DTensor& x) { return 1.5 - x; }, k(UnaryOp::kRsubScalar, 1.5)},
      {"x*2.5", [](const DTensor& x) { return x * 2.5; }, k(UnaryOp::kMulScalar, 2.5)},
      {"x*-2.5", [](const DTensor& x) { return x * -2.5; }, k(UnaryOp::kMulScalar, -2.5)},
      {"x/4", [](const DTensor& x) { return x / 4.0; }, k(UnaryOp::kDivScalar, 4)},
      {"x/-4", [](const DTensor& x) { return div(x, -4.0); }, k(UnaryOp::kDivScalar, -4)},
      {"x^1.5", [](const DTensor& x) { return pow(x, 1.5); }, k(UnaryOp::kPowScalar, 1.5), 0.5, 2},
      {"-x", [](const DTensor& x) { return -x; }, k(UnaryOp::kNeg)},
  };
}

TEST(DTensorOpsElementwise, UnaryEveryPlacement) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    const std::vector<Shape> shapes =
        mesh_shape.size() == 1 ? std::vector<Shape>{{6, 4}, {5, 3}} : std::vector<Shape>{{5, 3}};
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const UnaryCase& c : unary_cases()) {
        for (const Shape& shape : shapes) {
          InputGen g{shape, DType::f32, c.lo, c.hi, kSumMaxMin};
          op_test::run_matrix(
              c.name, mesh, {g}, [&](const std::vector<DTensor>& x) { return std::vector<DTensor>{c.dist(x[0])}; },
              [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{c.ref(x[0])}; }, false, failures);
        }
      }
    });
  }
  failures.report(3000);
}

struct BinaryCase {
  const char* name;
  std::function<DTensor(const DTensor&, const DTensor&)> dist;
  std::function<Tensor(const Tensor&, const Tensor&)> ref;
  std::vector<ReduceOp> partials;
  double lo_b = -2;  // div and pow need b (or a) away from 0
};

std::vector<BinaryCase> binary_cases() {
  using kernels::BinaryOp;
  auto k = [](BinaryOp op) { return [op](const Tensor& a, const Tensor& b) { return kernels::binary(op, a, b); }; };
  const ReduceOp sum = ReduceOp::kSum, mx = ReduceOp::kMax, mn = ReduceOp::kMin, avg = ReduceOp::kAvg;
  return {
      {"add", [](const DTensor& a, const DTensor& b) { return a + b; }, k(BinaryOp::kAdd), {sum, mx}},
      {"sub", [](const DTensor& a, const DTensor& b) { return a - b; }, k(BinaryOp::kSub), {sum, mn}},
      {"mul", [](const DTensor& a, const DTensor& b) { return a * b; }, k(BinaryOp::kMul), {sum, avg}},
      {"div", [](const DTensor& a, const DTensor& b) { return a / b; }, k(BinaryOp::kDiv), {sum}, 0.5},
      {"pow", [](const DTensor& a, const DTensor& b) { return pow(a, b); }, k(BinaryOp::kPow), {sum}, 0.5},
      {"maximum", [](const DTensor& a, const DTensor& b) { return maximum(a, b); }, k(BinaryOp::kMaximum), {mx}},
      {"minimum", [](const DTensor& a, const DTensor& b) { return minimum(a, b); }, k(BinaryOp::kMinimum), {mn, mx}},
  };
}

TEST(DTensorOpsElementwise, BinaryEveryPlacementWithBroadcasting) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    std::vector<std::pair<Shape, Shape>> shapes{{{5, 3}, {5, 3}}, {{5, 3}, {3}}};
    if (mesh_shape.size() == 1) {
      shapes.push_back({{6, 4}, {6, 4}});
      shapes.push_back({{4, 1}, {1, 3}});
    }
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const BinaryCase& c : binary_cases()) {
        for (const auto& [sa, sb] : shapes) {
          const double lo = c.lo_b;
          InputGen a{sa, DType::f32, std::string(c.name) == "pow" ? 0.5 : -2.0, 2, c.partials};
          InputGen b{sb, DType::f32, std::string(c.name) == "pow" ? -2.0 : lo, 2, c.partials};
          op_test::run_matrix(
              c.name, mesh, {a, b},
              [&](const std::vector<DTensor>& x) { return std::vector<DTensor>{c.dist(x[0], x[1])}; },
              [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{c.ref(x[0], x[1])}; }, false, failures,
              c.name);
        }
      }
    });
  }
  failures.report(20000);
}

TEST(DTensorOpsElementwise, OtherDtypes) {
  Failures failures;
  op_test::on_mesh({3}, [&](const DeviceMesh& mesh) {
    for (DType dt : {DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32}) {
      InputGen a{{5, 4}, dt, -3, 4, {ReduceOp::kSum, ReduceOp::kMax}};
      InputGen b{{5, 4}, dt, -3, 4, {ReduceOp::kSum}};
      op_test::run_matrix(
          std::string("add ") + dtype_name(dt), mesh, {a, b},
          [](const std::vector<DTensor>& x) { return std::vector<DTensor>{add(x[0], x[1])}; },
          [](const std::vector<Tensor>& x) { return std::vector<Tensor>{kernels::add(x[0], x[1])}; }, false, failures);
      op_test::run_matrix(
          std::string("mul ") + dtype_name(dt), mesh, {a, b},
          [](const std::vector<DTensor>& x) { return std::vector<DTensor>{mul(x[0], x[1])}; },
          [](const std::vector<Tensor>& x) { return std::vector<Tensor>{kernels::mul(x[0], x[1])}; }, false, failures);
    }
  });
  failures.report(500);
}

TEST(DTensorOpsElementwise, ComparisonsWhereMaskedFillCast) {
  Failures failures;
  using kernels::CompareOp;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      const Shape shape = mesh.ndim() == 1 ? Shape{5, 4} : Shape{3, 5};
      InputGen ia{shape, DType::i32, -2, 3, {}}, ib{{shape[1]}, DType::i32, -2, 3, {}};
      for (CompareOp op : {CompareOp::kEq, CompareOp::kLt, CompareOp::kGe}) {
        op_test::run_matrix(
            std::string("compare ") + kernels::compare_op_name(op), mesh, {ia, ib},
            [op](const std::vector<DTensor>& x) {
              DTensor r = op == CompareOp::kEq   ? eq(x[0], x[1])
                          : op == CompareOp::kLt ? lt(x[0], x[1])
                                                 : ge(x[0], x[1]);
              return std::vector<DTensor>{r};
            },
            [op](const std::vector<Tensor>& x) { return std::vector<Tensor>{kernels::compare(op, x[0], x[1])}; }, true,
            failures);
      }
      op_test::run_matrix(
          "gt scalar", mesh, {InputGen{shape, DType::f32, -2, 2, {ReduceOp::kSum}}},
          [](const std::vector<DTensor>& x) { return std::vector<DTensor>{gt(x[0], 0.25)}; },
          [](const std::vector<Tensor>& x) {
            return std::vector<Tensor>{kernels::compare_scalar(CompareOp::kGt, x[0], 0.25)};
          },
          true, failures);
      // where(cond, a, b): a and b may be Partial of the same op.
      const std::vector<ReduceOp> all{ReduceOp::kSum, ReduceOp::kMax};
      op_test::run_matrix(
          "where", mesh,
          {InputGen{{shape[1]}, DType::b8, 0, 2, {}}, InputGen{shape, DType::f32, -2, 2, all},
           InputGen{shape, DType::f32, -2, 2, all}},
          [](const std::vector<DTensor>& x) { return std::vector<DTensor>{where(x[0], x[1], x[2])}; },
          [](const std::vector<Tensor>& x) { return std::vector<Tensor>{kernels::where(x[0], x[1], x[2])}; }, false,
          failures, "where");
      for (double value : {0.0, -7.5}) {
        op_test::run_matrix(
            "masked_fill", mesh,
            {InputGen{shape, DType::f32, -2, 2, {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}},
             InputGen{shape, DType::b8, 0, 2, {}}},
            [value](const std::vector<DTensor>& x) { return std::vector<DTensor>{masked_fill(x[0], x[1], value)}; },
            [value](const std::vector<Tensor>& x) {
              return std::vector<Tensor>{kernels::masked_fill(x[0], x[1], value)};
            },
            false, failures, "masked_fill", ops::OpParams().set("value", value));
      }
      for (DType to_dtype : {DType::f64, DType::bf16, DType::i32}) {
        op_test::run_matrix(
            std::string("to ") + dtype_name(to_dtype), mesh,
            {InputGen{shape, DType::f32, -3, 3, {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}}},
            // A widening cast passes P(sum) through (the sum is then taken in the wider dtype, so it is compared
            // with f32's tolerance); other casts are compared bit for bit.
            [to_dtype](const std::vector<DTensor>& x) {
              DTensor y = to(x[0], to_dtype);
              return std::vector<DTensor>{to_dtype == DType::f64 ? to(y, DType::f32) : y};
            },
            [to_dtype](const std::vector<Tensor>& x) {
              Tensor y = x[0].to(to_dtype);
              return std::vector<Tensor>{to_dtype == DType::f64 ? y.to(DType::f32) : y};
            },
            to_dtype != DType::f64, failures);
      }
    });
  }
  failures.report(14000);
}

}  // namespace
}  // namespace dt
