// Placements without a direct rule: redistributed (exact, logged at debug level), or with implicit
// redistribution disabled an error naming the op, the placements given and a working alternative. Bad arguments
// are InvalidArgument naming the op.
#include <gtest/gtest.h>

#include <limits>

#include "core/logging.h"
#include "dtensor/comm_counter.h"
#include "kernels/ops/softmax.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(DTensorOpsErrors, NoDirectRuleRedistributesAndStaysExact) {
  Tensor full = Tensor::randn({4, 6}, 5);
  Tensor want = kernels::softmax(full, 1);
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    DTensor x = distribute_tensor(full, mesh, {Shard{1}});  // the normalized dim is sharded
    EXPECT_FALSE(ops::explain("softmax", {x}, ops::OpParams().set("dim", int64_t(1))).direct());
    CommCounter counter(mesh);
    if (mesh.global_rank() == 0) set_log_level(LogLevel::kDebug);  // the redistribution is logged (not captured)
    DTensor y = softmax(x, 1);
    EXPECT_GE(counter.total(), 1) << counter.summary();
    if (mesh.global_rank() == 0) set_log_level(LogLevel::kWarn);
    std::string why;
    EXPECT_TRUE(op_test::compare(y.full_tensor(), want, false, &why)) << why;
  });
}

TEST(DTensorOpsErrors, StrictModeNamesOpPlacementsAndAlternative) {
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    DTensor x = distribute_tensor(Tensor::randn({4, 6}, 5), mesh, {Shard{1}});
    ops::ImplicitRedistributeGuard strict(ops::ImplicitRedistribute::kError);
    try {
      softmax(x, 1);
      ADD_FAILURE() << "expected Unsupported";
    } catch (const Unsupported& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(contains(msg, "dt::softmax")) << msg;
      EXPECT_TRUE(contains(msg, "S(1)")) << msg;          // what was given
      EXPECT_TRUE(contains(msg, "S(0) -> S(0)")) << msg;  // the layout it would have used
    }
    // Allowed in strict mode: direct strategies and local-only changes (R -> S slicing, R -> P(sum) for a bias).
    DTensor ok = softmax(x, 0);
    EXPECT_TRUE(ok.placements()[0] == Placement(Shard{1}));
    DTensor xr = distribute_tensor(Tensor::randn({4, 6}, 6), mesh, {Shard{1}});
    DTensor w = distribute_tensor(Tensor::randn({3, 6}, 7), mesh, {Shard{1}});
    DTensor bias = distribute_tensor(Tensor::randn({3}, 8), mesh, {Replicate{}});
    EXPECT_TRUE(linear(xr, w, bias).placements()[0] == Placement(Partial{}));
  });
}

TEST(DTensorOpsErrors, MixedPartialHasNoStrategy) {
  op_test::on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    DTensor x = distribute_tensor(Tensor::randn({4, 4}, 1), mesh, {Partial{ReduceOp::kSum}, Partial{ReduceOp::kMax}});
    try {
      exp(x);
      ADD_FAILURE() << "expected Unsupported";
    } catch (const Unsupported& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(contains(msg, "dt::exp")) << msg;
      EXPECT_TRUE(contains(msg, "P(sum),P(max)")) << msg;
      EXPECT_TRUE(contains(msg, "a layout that works: R,R -> R,R")) << msg;
    }
  });
}

TEST(DTensorOpsErrors, BadArgumentsNameTheOp) {
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    DTensor a = distribute_tensor(Tensor::randn({3, 4}, 1), mesh, {Shard{0}});
    DTensor b = distribute_tensor(Tensor::randn({5, 2}, 2), mesh, {Replicate{}});
    auto expect_invalid = [](const std::function<void()>& f, const std::string& part) {
      try {
        f();
        ADD_FAILURE() << "expected InvalidArgument containing " << part;
      } catch (const InvalidArgument& e) {
        EXPECT_TRUE(contains(e.what(), part)) << e.what();
      }
    };
    expect_invalid([&] { matmul(a, b); }, "dt::matmul: contracting sizes differ");
    expect_invalid([&] { add(a, b); }, "dt::add: shapes [3, 4], [5, 2] do not broadcast");
    expect_invalid([&] { add(eq(a, a), eq(a, a)); }, "dt::add: bool inputs are not supported");
    expect_invalid([&] { pow(to(a, DType::i32), to(a, DType::i64)); }, "dt::pow: needs a floating operand");
    expect_invalid([&] { reshape(a, {5}); }, "dt::reshape: cannot reshape");
    expect_invalid([&] { softmax(a, 2); }, "dt::softmax: dim 2 is out of range");
    expect_invalid([&] { sum(a, {0, 0}); }, "listed twice");
    expect_invalid([&] { linear(a, b); }, "dt::linear");
    expect_invalid([&] { embedding(a, b); }, "dt::embedding: ids must have an integer dtype");
    DeviceMesh other = DeviceMesh::create(default_world(), Device::cpu(), {2}, {}, {1, 0});
    DTensor c = distribute_tensor(Tensor::randn({3, 4}, 3), other, {Replicate{}});
    expect_invalid([&] { add(a, c); }, "dt::add: b is on");
    expect_invalid([&] { narrow(a, 1, std::numeric_limits<int64_t>::max(), 2); }, "dt::narrow: start");
    expect_invalid([&] { mesh.local_rank(5); }, "mesh dim 5 is out of range");
  });
}

}  // namespace
}  // namespace dt
