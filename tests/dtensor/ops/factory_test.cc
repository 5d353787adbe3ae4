// DTensor factories and dropout: every rank fills only its block, and the value equals the single-process tensor
// (Tensor::rand / randn / full) whatever the mesh and placements (uneven, empty, nested and Partial included).
#include <gtest/gtest.h>

#include "dtensor/comm_counter.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using op_test::Failures;

const std::vector<Shape> kShapes{{5, 3}, {7}, {0, 4}, {2, 3, 1}, {1, 6}, {}};

// For every standard mesh, shape and spec (R, S(d), P(sum), P(max), nested orders): make(shape, mesh, spec) must
// hold `want(shape)` and communicate nothing.
void check_factory(const std::string& label,
                   const std::function<DTensor(const Shape&, const DeviceMesh&, const ShardingSpec&)>& make,
                   const std::function<Tensor(const Shape&)>& want, bool exact = true) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const Shape& shape : kShapes) {
        for (const ShardingSpec& spec :
             op_test::specs_for(int64_t(shape.size()), mesh.ndim(), {ReduceOp::kSum, ReduceOp::kMax})) {
          CommCounter counter(mesh);
          DTensor x = make(shape, mesh, spec);
          const int64_t sent = counter.total();
          const std::string what =
              label + " " + shape_str(shape) + " " + spec.to_string() + " on " + shape_str(mesh.shape().sizes());
          if (sent != 0) failures.add(what + ": communicated");
          if (!(x.spec() == spec) || x.shape() != shape) failures.add(what + ": got " + x.describe());
          if (x.to_local().shape() != local_shape(shape, mesh.shape(), spec, mesh.coordinate()))
            failures.add(what + ": local shape " + shape_str(x.to_local().shape()));
          std::string why;
          if (!op_test::compare(x.full_tensor(), want(shape), exact, &why)) failures.add(what + ": " + why);
          failures.add_cases(1);
        }
      }
    });
  }
  failures.report(200);
}

TEST(DTensorFactory, RandIsTheSliceOfTensorRand) {
  for (DType dtype : {DType::f32, DType::i64}) {
    FactoryOptions o{dtype, 1234, {}};
    check_factory(
        std::string("rand ") + dtype_name(dtype),
        [&](const Shape& s, const DeviceMesh& m, const ShardingSpec& spec) {
          return rand(s, m, spec.placements(), FactoryOptions{dtype, 1234, spec.shard_order()}, -3, 5);
        },
        [&](const Shape& s) { return Tensor::rand(s, o.seed, dtype, -3, 5); });
  }
}

TEST(DTensorFactory, RandnIsTheSliceOfTensorRandn) {
  check_factory(
      "randn",
      [](const Shape& s, const DeviceMesh& m, const ShardingSpec& spec) {
        return randn(s, m, spec.placements(), FactoryOptions{DType::f64, 99, spec.shard_order()}, 1.5, 2);
      },
      [](const Shape& s) { return Tensor::randn(s, 99, DType::f64, 1.5, 2); });
}

TEST(DTensorFactory, TruncNormalIsTheSliceOfTheWholeFill) {
  check_factory(
      "trunc_normal",
      [](const Shape& s, const DeviceMesh& m, const ShardingSpec& spec) {
        return trunc_normal(s, m, spec.placements(), FactoryOptions{DType::f32, 5, spec.shard_order()}, 0.5, 2, -1, 3);
      },
      [](const Shape& s) {
        return Tensor::trunc_normal_block(s, Shape(s.size(), 0), s, 5, DType::f32, 0.5, 2, -1, 3);
      });
}

TEST(DTensorFactory, FullZerosOnes) {
  check_factory(
      "full",
      [](const Shape& s, const DeviceMesh& m, const ShardingSpec& spec) {
        return full(s, 2.5, m, spec.placements(), FactoryOptions{DType::bf16, 0, spec.shard_order()});
      },
      [](const Shape& s) { return Tensor::full(s, 2.5, DType::bf16); });
  check_factory(
      "zeros",
      [](const Shape& s, const DeviceMesh& m, const ShardingSpec& spec) {
        return zeros(s, m, spec.placements(), FactoryOptions{DType::i32, 0, spec.shard_order()});
      },
      [](const Shape& s) { return Tensor::zeros(s, DType::i32); });
  check_factory(
      "ones",
      [](const Shape& s, const DeviceMesh& m, const ShardingSpec& spec) {
        return ones(s, m, spec.placements(), FactoryOptions{DType::f32, 0, spec.shard_order()});
      },
      [](const Shape& s) { return Tensor::ones(s); });
}

TEST(DTensorFactory, EmptyHasTheLayoutAndPartialSumHoldsTheValueOnce) {
  op_test::on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    DTensor e = empty({5, 3}, mesh, {Shard{0}, Shard{1}}, {DType::f16, 0, {}});
    EXPECT_EQ(e.to_local().shape(), local_shape({5, 3}, mesh.shape(), e.spec(), mesh.coordinate()));
    EXPECT_EQ(e.dtype(), DType::f16);
    // P(sum) on mesh dim 1: coordinate 0 holds the value, the other zeros.
    DTensor f = full({3}, 4.0, mesh, {Replicate{}, Partial{ReduceOp::kSum}});
    const double held = mesh.coordinate()[1] == 0 ? 4.0 : 0.0;
    EXPECT_TRUE(equal(f.to_local(), Tensor::full({3}, held)));
  });
}

TEST(DTensorFactory, BadArguments) {
  op_test::on_mesh({2}, [](const DeviceMesh& mesh) {
    EXPECT_THROW(zeros({-1, 3}, mesh, {Replicate{}}), InvalidArgument);
    EXPECT_THROW(zeros({4}, mesh, {Shard{1}}), InvalidArgument);
    EXPECT_THROW(zeros({4}, mesh, {Replicate{}, Replicate{}}), InvalidArgument);
    EXPECT_THROW(rand({4}, mesh, {Replicate{}}, {}, 2, 1), InvalidArgument);
  });
}

TEST(DTensorFactory, RandBlockMatchesTheFullFill) {
  const Shape g{4, 5, 3};
  Tensor whole = Tensor::randn(g, 7);
  Tensor block = Tensor::randn_block(g, {1, 2, 0}, {2, 3, 3}, 7);
  EXPECT_TRUE(equal(block, whole.narrow(0, 1, 2).narrow(1, 2, 3).contiguous()));
  EXPECT_EQ(Tensor::rand_block(g, {4, 0, 0}, {0, 5, 3}, 7).numel(), 0);
  EXPECT_THROW(Tensor::rand_block(g, {3, 0, 0}, {2, 5, 3}, 7), InvalidArgument);
}

// dropout: the reference builds the mask from Tensor::rand(shape, seed, f64) on the full tensor.
Tensor dropout_ref(const Tensor& x, double p, uint64_t seed) {
  std::vector<double> u = Tensor::rand(x.shape(), seed, DType::f64).to_vector();
  std::vector<double> v = x.to_vector();
  for (size_t i = 0; i < v.size(); ++i) v[i] = u[i] < p ? 0.0 : v[i] * (1.0 / (1.0 - p));
  return Tensor::from_vector(v, x.shape(), x.dtype());
}

TEST(DTensorDropout, EveryPlacementMatchesTheFullMask) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const Shape& shape : kShapes) {
        for (double p : {0.0, 0.3, 1.0}) {
          op_test::run_matrix(
              "dropout p=" + std::to_string(p), mesh, {op_test::InputGen(shape, DType::f32, -2, 2, {ReduceOp::kSum})},
              [&](const std::vector<DTensor>& x) {
                DTensor y = dropout(x[0], p, 42);
                // Shard/Replicate placements are kept; Partial is reduced first.
                if (!x[0].spec().has_partial() && !(y.spec() == x[0].spec()))
                  failures.add("dropout changed " + x[0].spec().to_string() + " to " + y.spec().to_string());
                return std::vector<DTensor>{y, dropout_backward(x[0], p, 42)};
              },
              [&](const std::vector<Tensor>& x) {
                Tensor want = dropout_ref(x[0], p, 42);
                return std::vector<Tensor>{want, want};
              },
              false, failures);
        }
      }
    });
  }
  failures.report(300);
}

TEST(DTensorDropout, EvalIsIdentityAndBadP) {
  op_test::on_mesh({2}, [](const DeviceMesh& mesh) {
    DTensor x = rand({4, 3}, mesh, {Shard{0}});
    EXPECT_TRUE(equal(dropout(x, 0.5, 1, false).to_local(), x.to_local()));
    EXPECT_THROW(dropout(x, 1.5, 1), InvalidArgument);
    EXPECT_THROW(dropout(rand({4}, mesh, {Shard{0}}, {DType::i32, 0, {}}, 0, 9), 0.5, 1), InvalidArgument);
  });
}

}  // namespace
}  // namespace dt
