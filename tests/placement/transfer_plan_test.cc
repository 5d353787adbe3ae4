// Transfer plans (placement/transfer_plan.h), pure: on random layouts between two meshes of one world (disjoint,
// overlapping, different shapes), every receiver's block is tiled exactly once by the regions it receives, every
// region lies inside the sender's block as the layout math assigns it, and the cache returns one plan per key.
#include "placement/transfer_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace dt {
namespace {

std::vector<Placement> random_plain(std::mt19937& rng, int64_t mesh_ndim, int64_t ndim) {
  std::vector<Placement> out;
  for (int64_t m = 0; m < mesh_ndim; ++m) {
    const int64_t r = int64_t(rng() % uint32_t(ndim + 1));
    out.push_back(r == ndim ? Placement(Replicate{}) : Placement(Shard{r}));
  }
  return out;
}

int64_t box_numel(const Box& b) {
  int64_t n = 1;
  for (const IndexRange& r : b) n *= r.size();
  return n;
}

bool inside(const Box& inner, const Box& outer) {
  for (size_t d = 0; d < inner.size(); ++d)
    if (inner[d].begin < outer[d].begin || inner[d].end > outer[d].end) return false;
  return true;
}

TEST(TransferPlan, RegionsTileEveryReceiverOnce) {
  std::mt19937 rng(7);
  const std::vector<MeshShape> meshes = {MeshShape({4}),
                                         MeshShape({2, 2}),
                                         MeshShape({2}, {}, {2, 3}),
                                         MeshShape({3}, {}, {1, 2, 3}),
                                         MeshShape({1}, {}, {0}),
                                         MeshShape({2, 2}, {}, {3, 2, 1, 0})};
  const std::vector<Shape> shapes = {{8, 6}, {5, 3}, {1, 7}, {0, 4}, {9}};
  int64_t cases = 0;
  for (const MeshShape& src_mesh : meshes) {
    for (const MeshShape& dst_mesh : meshes) {
      for (const Shape& shape : shapes) {
        const int64_t nd = int64_t(shape.size());
        const ShardingSpec src(random_plain(rng, src_mesh.ndim(), nd));
        const ShardingSpec dst(random_plain(rng, dst_mesh.ndim(), nd));
        const TransferPlan& plan = plan_transfers(src_mesh, src, dst_mesh, dst, shape);
        EXPECT_EQ(&plan, &plan_transfers(src_mesh, src, dst_mesh, dst, shape));  // cached
        for (int64_t t : dst_mesh.ranks()) {
          const Box want = local_ranges(shape, dst_mesh, dst, dst_mesh.coordinate_of(t));
          int64_t received = 0;
          for (const BlockTransfer& x : plan.transfers) {
            if (x.receiver != t) continue;
            EXPECT_EQ(x.dst_box, want);
            EXPECT_TRUE(inside(x.region, want));
            ASSERT_TRUE(src_mesh.contains(x.sender));
            EXPECT_EQ(x.src_box, local_ranges(shape, src_mesh, src, src_mesh.coordinate_of(x.sender)));
            EXPECT_TRUE(inside(x.region, x.src_box));
            received += box_numel(x.region);
          }
          // The distinct source blocks tile the tensor without overlap, so the regions cover the block once.
          EXPECT_EQ(received, box_numel(want)) << "rank " << t << " " << src << " -> " << dst;
        }
        for (size_t i = 0; i < plan.transfers.size(); ++i) {
          const BlockTransfer& x = plan.transfers[i];
          for (int64_t r : {x.sender, x.receiver}) {
            const auto& mine = plan.involving(r);
            EXPECT_NE(std::find(mine.begin(), mine.end(), int32_t(i)), mine.end());
          }
        }
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, int64_t(meshes.size() * meshes.size() * shapes.size()));
}

TEST(TransferPlan, PartialSpecsAreRefused) {
  EXPECT_THROW(plan_transfers_uncached(MeshShape({2}), ShardingSpec({Partial{}}), MeshShape({2}),
                                       ShardingSpec({Replicate{}}), {4}),
               InvalidArgument);
  EXPECT_EQ(without_partial(ShardingSpec({Partial{ReduceOp::kMax}, Shard{0}})), ShardingSpec({Replicate{}, Shard{0}}));
}

}  // namespace
}  // namespace dt
