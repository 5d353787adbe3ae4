// In-place updates: x keeps its spec and its local storage, and its value is the single-process update of the full
// tensors, for every placement pair on the standard meshes (Partial x and y included).
#include <gtest/gtest.h>

#include "kernels/ops/elementwise.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using op_test::Failures;
using op_test::InputGen;

// Runs `update` on a private copy of x (so the harness's inputs stay intact) and checks spec and storage identity.
std::vector<DTensor> updated(const DTensor& x0, Failures& failures, const std::function<void(DTensor&)>& update) {
  DTensor x = DTensor::from_local_unchecked(x0.to_local().clone(), x0.mesh(), x0.spec(), x0.shape());
  const void* ptr = x.to_local().numel() > 0 ? x.to_local().data_ptr() : nullptr;
  const std::shared_ptr<Storage> storage = x.to_local().storage();
  update(x);
  if (!(x.spec() == x0.spec())) failures.add("spec changed to " + x.spec().to_string());
  if (x.to_local().storage() != storage || (ptr && x.to_local().data_ptr() != ptr))
    failures.add("the local storage changed");
  return {x};
}

TEST(DTensorOpsInplace, AddMulCopyEveryPlacement) {
  Failures failures;
  const std::vector<ReduceOp> kSum{ReduceOp::kSum};
  const std::vector<ReduceOp> kSumMax{ReduceOp::kSum, ReduceOp::kMax};
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const Shape& ys : {Shape{5, 3}, Shape{3}}) {
        op_test::run_matrix(
            "add_ y " + shape_str(ys), mesh,
            {InputGen({5, 3}, DType::f32, -2, 2, kSumMax), InputGen(ys, DType::f32, -2, 2, kSum)},
            [&](const std::vector<DTensor>& in) {
              return updated(in[0], failures, [&](DTensor& x) { add_(x, in[1], 0.5); });
            },
            [&](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{kernels::add(in[0], kernels::mul_scalar(in[1], 0.5))};
            },
            false, failures);
        op_test::run_matrix(
            "mul_ y " + shape_str(ys), mesh,
            {InputGen({5, 3}, DType::f32, -2, 2, kSum), InputGen(ys, DType::f64, -2, 2, kSum)},
            [&](const std::vector<DTensor>& in) {
              return updated(in[0], failures, [&](DTensor& x) { mul_(x, in[1]); });
            },
            [&](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{kernels::mul(in[0], in[1].to(DType::f32))};
            },
            false, failures);
        op_test::run_matrix(
            "copy_ y " + shape_str(ys), mesh,
            {InputGen({5, 3}, DType::f32, -2, 2, kSumMax), InputGen(ys, DType::f32, -2, 2, kSum)},
            [&](const std::vector<DTensor>& in) {
              return updated(in[0], failures, [&](DTensor& x) { copy_(x, in[1]); });
            },
            [&](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{in[1].expand({5, 3}).contiguous()};
            },
            false, failures);
      }
      op_test::run_matrix(
          "mul_ scalar", mesh, {InputGen({5, 3}, DType::f32, -2, 2, kSumMax)},
          [&](const std::vector<DTensor>& in) { return updated(in[0], failures, [&](DTensor& x) { mul_(x, 0.25); }); },
          [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{kernels::mul_scalar(in[0], 0.25)}; }, false,
          failures);
    });
  }
  failures.report(1000);
}

TEST(DTensorOpsInplace, InexactPartialsAndBadArguments) {
  op_test::on_mesh({2}, [](const DeviceMesh& mesh) {
    DTensor y = distribute_tensor(Tensor::rand({4, 3}, 1), mesh, {Replicate{}}, {}, std::nullopt);
    DTensor pmax = distribute_tensor(Tensor::rand({4, 3}, 2), mesh, {Partial{ReduceOp::kMax}}, {}, std::nullopt);
    DTensor pprod = distribute_tensor(Tensor::rand({4, 3}, 3), mesh, {Partial{ReduceOp::kProduct}}, {}, std::nullopt);
    EXPECT_THROW(mul_(pmax, y), Unsupported);
    EXPECT_THROW(mul_(pmax, -2.0), Unsupported);
    EXPECT_THROW(add_(pprod, y), Unsupported);
    DTensor x = distribute_tensor(Tensor::rand({4, 3}, 4), mesh, {Shard{0}}, {}, std::nullopt);
    EXPECT_THROW(add_(x, distribute_tensor(Tensor::rand({4, 2}, 1), mesh, {Replicate{}}, {}, std::nullopt)),
                 InvalidArgument);
    EXPECT_THROW(copy_(x, DTensor()), InvalidArgument);
  });
}

}  // namespace
}  // namespace dt
