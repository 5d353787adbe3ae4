// distribute_tensor on the thread backend: from a source rank (src_data_rank, PyTorch's default 0 and others),
// with non-source ranks passing (shape, dtype) or a tensor whose data must be ignored, and with std::nullopt (every
// rank slices its own tensor, no communication). Each rank's block is compared with a reference cut from the
// source's full tensor on one process by the layout math, Partial dims by the rule written out here.
#include <gtest/gtest.h>

#include <string>

#include "collectives/thread/thread_comm.h"
#include "dtensor/dtensor.h"
#include "placement/layout.h"
#include "tests/dtensor/redistribute_cases.h"

namespace dt {
namespace {

// The reference block: the plain block of `full`, then per Partial mesh dim where this rank's coordinate is not 0,
// zeros for sum and ones for product (avg, max and min keep the value).
Tensor reference_block(const Tensor& full, const DeviceMesh& mesh, const std::vector<Placement>& placements) {
  std::vector<Placement> plain = placements;
  for (Placement& p : plain)
    if (is_partial(p)) p = Replicate{};
  ShardingSpec spec(normalize_placements(plain, full.dim()));
  auto ranges = local_ranges(full.shape(), mesh.shape(), spec, mesh.coordinate());
  Tensor v = full;
  for (size_t d = 0; d < ranges.size(); ++d) v = v.narrow(int64_t(d), ranges[d].begin, ranges[d].size());
  v = v.contiguous();
  for (size_t m = 0; m < placements.size(); ++m) {
    if (!is_partial(placements[m]) || mesh.coordinate()[m] == 0) continue;
    ReduceOp op = std::get<Partial>(placements[m]).op;
    if (op == ReduceOp::kSum) v = Tensor::zeros(v.shape(), v.dtype());
    if (op == ReduceOp::kProduct) v = Tensor::ones(v.shape(), v.dtype());
  }
  return v;
}

struct Case {
  std::vector<int64_t> mesh;
  std::vector<Placement> placements;
};

TEST(DistributeTensor, FromSourceRankMatchesTheReference) {
  const std::vector<Case> cases = {
      {{4}, {Shard{0}}},
      {{4}, {Shard{1}}},
      {{4}, {Replicate{}}},
      {{4}, {Partial{ReduceOp::kSum}}},
      {{4}, {Partial{ReduceOp::kProduct}}},
      {{2, 2}, {Shard{0}, Shard{1}}},
      {{2, 2}, {Shard{1}, Shard{1}}},
      {{2, 2}, {Replicate{}, Shard{0}}},
      {{2, 2}, {Partial{ReduceOp::kSum}, Shard{1}}},
      {{2, 2}, {Shard{0}, Partial{ReduceOp::kMax}}},
      {{2, 2}, {Partial{ReduceOp::kSum}, Partial{ReduceOp::kSum}}},
  };
  // Uneven (5 over 4, 3 over 2) and empty shards (1 over 4; a zero-size dim).
  const std::vector<Shape> shapes = {{8, 4}, {5, 3}, {1, 7}, {0, 3}, {3, 1}};
  run_threads(4, [&](CommunicatorPtr world) {
    const int64_t me = world->rank();
    uint64_t seed = 100;
    for (const Case& c : cases) {
      DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), c.mesh);
      for (const Shape& shape : shapes) {
        for (DType dtype : {DType::f32, DType::i64}) {
          for (int64_t src : {0, 3, 1}) {
            ++seed;
            const Tensor full = testing::case_tensor(shape, dtype, seed);
            SCOPED_TRACE("mesh " + mesh.to_string() + " " + to_string(c.placements) + " shape " + shape_str(shape) +
                         " " + dtype_name(dtype) + " src " + std::to_string(src));
            DTensor x;
            if (me == src) {
              x = distribute_tensor(full, mesh, c.placements, {}, src);
            } else if (me % 2 == 0) {
              x = distribute_tensor(shape, dtype, mesh, c.placements, {}, src);
            } else {
              // Another tensor of the same shape: only the source's data counts.
              x = distribute_tensor(testing::case_tensor(shape, dtype, seed + 7777), mesh, c.placements, {}, src);
            }
            EXPECT_EQ(x.shape(), shape);
            EXPECT_EQ(x.dtype(), dtype);
            EXPECT_TRUE(equal(x.to_local(), reference_block(full, mesh, c.placements)))
                << "rank " << me << ": " << x.describe();
            EXPECT_TRUE(equal(x.full_tensor(), full));
          }
        }
      }
    }
    // PyTorch's default: rank 0 is the source.
    const Tensor full = testing::case_tensor({6, 5}, DType::f32, 9);
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {4});
    DTensor x = me == 0 ? distribute_tensor(full, mesh, {Shard{1}})
                        : distribute_tensor(Shape{6, 5}, DType::f32, mesh, {Shard{1}});
    EXPECT_TRUE(equal(x.to_local(), reference_block(full, mesh, {Shard{1}})));
  });
}

TEST(DistributeTensor, WithoutSourceEachRankSlicesItsOwnTensor) {
  run_threads(4, [&](CommunicatorPtr world) {
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 2});
    // Every rank passes a different tensor: with std::nullopt nothing is exchanged, so each keeps its own data.
    const Tensor mine = testing::case_tensor({5, 6}, DType::f32, 40 + uint64_t(world->rank()));
    const std::vector<Placement> placements = {Shard{0}, Partial{ReduceOp::kSum}};
    DTensor x = distribute_tensor(mine, mesh, placements, {}, std::nullopt);
    EXPECT_TRUE(equal(x.to_local(), reference_block(mine, mesh, placements)));
  });
}

TEST(DistributeTensor, DisagreementsAreErrorsOnEveryRank) {
  run_threads(4, [&](CommunicatorPtr world) {
    const int64_t me = world->rank();
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {4});
    const Tensor full = testing::case_tensor({4, 4}, DType::f32, 3);
    auto expect_error = [&](const std::function<void()>& call, const std::string& needle) {
      try {
        call();
        ADD_FAILURE() << "rank " << me << ": expected an error containing '" << needle << "'";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    // Rank 2 passes another shape: every rank throws, naming rank 2.
    expect_error(
        [&] {
          distribute_tensor(me == 2 ? Tensor::zeros({4, 5}) : full, mesh, {Shard{0}});
        },
        "rank 2 passed [4, 5] f32 but the source rank 0 holds [4, 4] f32");
    // Rank 1 passes another dtype through the (shape, dtype) overload.
    expect_error(
        [&] {
          if (me == 0)
            distribute_tensor(full, mesh, {Shard{0}});
          else
            distribute_tensor(Shape{4, 4}, me == 1 ? DType::f64 : DType::f32, mesh, {Shard{0}});
        },
        "rank 1 passed [4, 4] f64");
    // The source passes no tensor.
    expect_error([&] { distribute_tensor(Shape{4, 4}, DType::f32, mesh, {Shard{0}}, {}, 1); }, "rank 1 is the source");
    // The ranks name different sources.
    expect_error([&] { distribute_tensor(full, mesh, {Shard{0}}, {}, me == 3 ? 2 : 0); }, "names source rank");
    // A source outside the mesh.
    expect_error([&] { distribute_tensor(full, mesh, {Shard{0}}, {}, 7); }, "src_data_rank 7 is not part of");
  });
}

}  // namespace
}  // namespace dt
