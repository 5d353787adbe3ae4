// Type promotion of the binary elementwise ops: the result dtype follows torch's table (written out here, not
// computed with promote_types), and the value equals the kernel on the full operands converted to it, for every
// placement pair (Partial(sum) included: it is reduced first where the conversion is not exact).
#include <gtest/gtest.h>

#include "dtensor/comm_counter.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/type_promotion.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using kernels::BinaryOp;
using op_test::Failures;
using op_test::InputGen;

struct PairCase {
  DType a, b, want;
};

// torch.promote_types, except u8 with i8 (torch: i16, which dtensor lacks).
const std::vector<PairCase> kPairs{
    {DType::f32, DType::f64, DType::f64}, {DType::f16, DType::bf16, DType::f32}, {DType::bf16, DType::f32, DType::f32},
    {DType::i32, DType::f16, DType::f16}, {DType::i64, DType::i32, DType::i64},  {DType::u8, DType::i8, DType::i32},
    {DType::b8, DType::i32, DType::i32},  {DType::i8, DType::b8, DType::i8},     {DType::f32, DType::i64, DType::f32},
};

TEST(DTensorOpsPromotion, TableMatchesTorch) {
  for (const PairCase& c : kPairs) {
    EXPECT_EQ(kernels::promote_types(c.a, c.b), c.want) << dtype_name(c.a) << " " << dtype_name(c.b);
    EXPECT_EQ(kernels::promote_types(c.b, c.a), c.want) << dtype_name(c.b) << " " << dtype_name(c.a);
  }
  EXPECT_EQ(kernels::promote_with_scalar(DType::f16, 2.5), DType::f16);
  EXPECT_EQ(kernels::promote_with_scalar(DType::i32, 2.5), DType::f32);
  EXPECT_EQ(kernels::promote_with_scalar(DType::i32, 2), DType::i32);
  EXPECT_EQ(kernels::promote_with_scalar(DType::b8, 2), DType::i64);
}

TEST(DTensorOpsPromotion, BinaryOpsEveryPlacement) {
  Failures failures;
  struct Op {
    const char* name;
    std::function<DTensor(const DTensor&, const DTensor&)> dist;
    BinaryOp op;
  };
  const std::vector<Op> ops{
      {"add", [](const DTensor& a, const DTensor& b) { return a + b; }, BinaryOp::kAdd},
      {"mul", [](const DTensor& a, const DTensor& b) { return mul(a, b); }, BinaryOp::kMul},
      {"maximum", [](const DTensor& a, const DTensor& b) { return maximum(a, b); }, BinaryOp::kMaximum}};
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const PairCase& c : kPairs) {
        // A Partial operand is summed in its own dtype by the reference but in the promoted one by the op: compare
        // at the precision of the narrowest floating operand.
        DType cmp = c.want;
        for (DType t : {c.a, c.b})
          if (is_floating(t) && dtype_size(t) < dtype_size(cmp)) cmp = t == DType::f16 ? DType::bf16 : t;
        for (const Op& op : ops) {
          auto gen = [&](DType t, Shape shape) {
            const double lo = t == DType::b8 ? 0 : t == DType::u8 ? 0 : -5, hi = t == DType::b8 ? 2 : 5;
            std::vector<ReduceOp> partial;
            if (t != DType::b8 && t != DType::u8) partial = {ReduceOp::kSum};
            return InputGen(std::move(shape), t, lo, hi, partial);
          };
          op_test::run_matrix(
              std::string(op.name) + " " + dtype_name(c.a) + " " + dtype_name(c.b), mesh,
              {gen(c.a, {5, 3}), gen(c.b, {3})},
              [&](const std::vector<DTensor>& x) {
                DTensor y = op.dist(x[0], x[1]);
                if (y.dtype() != c.want) failures.add(std::string("dtype ") + dtype_name(y.dtype()));
                return std::vector<DTensor>{to(y, cmp)};
              },
              [&](const std::vector<Tensor>& x) {
                return std::vector<Tensor>{kernels::binary(op.op, x[0].to(c.want), x[1].to(c.want)).to(cmp)};
              },
              false, failures);
        }
      }
    });
  }
  failures.report(500);
}

TEST(DTensorOpsPromotion, ComparisonsWhereDivAndScalars) {
  op_test::on_mesh({3}, [](const DeviceMesh& mesh) {
    Tensor fa = Tensor::rand({7, 2}, 1, DType::f32, -3, 3), ia = Tensor::rand({7, 2}, 2, DType::i32, -3, 3);
    DTensor a = distribute_tensor(fa, mesh, {Shard{0}}, {}, std::nullopt);
    DTensor i = distribute_tensor(ia, mesh, {Shard{0}}, {}, std::nullopt);
    EXPECT_TRUE(equal(lt(i, a).full_tensor(), kernels::lt(ia.to(DType::f32), fa)));
    DTensor w = where(lt(i, a), i, a);
    EXPECT_EQ(w.dtype(), DType::f32);
    EXPECT_TRUE(equal(w.full_tensor(), kernels::where(kernels::lt(ia.to(DType::f32), fa), ia.to(DType::f32), fa)));
    DTensor d = div(i, i + 10.0);
    EXPECT_EQ(d.dtype(), DType::f32);
    EXPECT_TRUE(allclose(d.full_tensor(), kernels::div(ia.to(DType::f32), kernels::add_scalar(ia, 10).to(DType::f32))));
    // Scalars: a floating tensor keeps its dtype, an integer one becomes f32 only for a non-integer scalar.
    DTensor h = to(a, DType::f16);
    EXPECT_EQ((h * 2.5).dtype(), DType::f16);
    EXPECT_EQ((i * 2.0).dtype(), DType::i32);
    DTensor s = i * 2.5;
    EXPECT_EQ(s.dtype(), DType::f32);
    EXPECT_TRUE(allclose(s.full_tensor(), kernels::mul_scalar(ia.to(DType::f32), 2.5)));
    EXPECT_EQ((i / 2.0).dtype(), DType::f32);
    EXPECT_TRUE(allclose((i / 2.0).full_tensor(), kernels::div_scalar(ia.to(DType::f32), 2)));
  });
}

// A plain Tensor operand is Replicate on the DTensor's mesh: the same value as the kernels on full tensors, for
// every placement of the DTensor, and no communication when the DTensor needs none.
TEST(DTensorOpsMixed, TensorOperandIsReplicate) {
  Failures failures;
  const Tensor t = Tensor::rand({3}, 77, DType::f32, -2, 2);
  const Tensor t2 = Tensor::rand({5, 3}, 78, DType::f32, -2, 2);
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      op_test::run_matrix(
          "mixed", mesh, {InputGen({5, 3}, DType::f32, -2, 2, {ReduceOp::kSum, ReduceOp::kMax})},
          [&](const std::vector<DTensor>& x) {
            return std::vector<DTensor>{x[0] + t,         t - x[0],    mul(x[0], t2), t2 / x[0],
                                        maximum(t, x[0]), lt(x[0], t), ge(t2, x[0])};
          },
          [&](const std::vector<Tensor>& x) {
            return std::vector<Tensor>{kernels::add(x[0], t),
                                       kernels::sub(t, x[0]),
                                       kernels::mul(x[0], t2),
                                       kernels::div(t2, x[0]),
                                       kernels::maximum(t, x[0]),
                                       kernels::lt(x[0], t),
                                       kernels::ge(t2, x[0])};
          },
          false, failures);
    });
  }
  failures.report(40);
  op_test::on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    DTensor x = distribute_tensor(Tensor::rand({5, 3}, 3), mesh, {Shard{0}, Shard{1}}, {}, std::nullopt);
    CommCounter counter(mesh);
    DTensor y = x * t2;
    EXPECT_EQ(counter.total(), 0) << counter.summary();
    EXPECT_TRUE(y.spec() == x.spec()) << y.describe();
    EXPECT_THROW(add(DTensor(), t), InvalidArgument);
    EXPECT_THROW(add(x, Tensor::rand({4}, 1)), InvalidArgument);  // shapes do not broadcast
  });
}

}  // namespace
}  // namespace dt
