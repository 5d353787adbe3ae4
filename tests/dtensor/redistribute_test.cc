// Redistribution on the thread backend: the full transition matrix, a randomized property test, cross-mesh,
// asynchronous redistribution and the error paths.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>

#include "collectives/thread/thread_comm.h"
#include "dtensor/comm_counter.h"
#include "dtensor/dtensor.h"
#include "dtensor/visualize.h"
#include "placement/layout.h"
#include "tests/dtensor/redistribute_cases.h"

namespace dt {
namespace {

using testing::MatrixOptions;
using testing::MatrixResult;

// Runs the matrix on `world_size` threads and reports rank 0's failures (every rank checks its own view).
void run_matrix(int world_size, const MatrixOptions& options, int64_t min_cases,
                ThreadCommOptions thread_options = {}) {
  std::mutex mu;
  std::vector<std::string> failures;
  int64_t cases = 0, unsupported = 0;
  run_threads(
      world_size,
      [&](CommunicatorPtr world) {
        MatrixResult r = testing::run_redistribution_matrix(world, options);
        std::lock_guard<std::mutex> lock(mu);
        for (auto& f : r.failures) failures.push_back("rank " + std::to_string(world->rank()) + ": " + f);
        if (world->rank() == 0) {
          cases = r.cases;
          unsupported = r.unsupported;
        }
      },
      thread_options);
  for (size_t i = 0; i < failures.size() && i < 10; ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty());
  std::printf("%d ranks: %lld redistributions checked, %lld unsupported pairs rejected\n", world_size, (long long)cases,
              (long long)unsupported);
  EXPECT_GE(cases, min_cases);
  EXPECT_GT(unsupported, 0);
}

TEST(Redistribute, EveryPairOn1dMeshes) {
  for (int n = 1; n <= 4; ++n) {
    MatrixOptions o;
    o.meshes = {{n}};
    o.shapes = {{8, 6}, {7, 5}, {2, 3}, {0, 4}};  // even, uneven, empty shards (2 rows over 3-4 ranks), empty
    o.dtypes = {DType::f32};
    run_matrix(n, o, 100);
  }
}

// The transitions' staging path, for communicators without strided views (NCCL): blocks packed into and unpacked
// from contiguous buffers around all_gather / all_to_allv.
TEST(Redistribute, StagingWithoutStridedViews) {
  ThreadCommOptions no_views;
  no_views.strided_views = false;
  for (int n : {2, 3, 4}) {
    MatrixOptions o;
    o.meshes = {{n}};
    o.shapes = {{8, 6}, {7, 5}, {2, 3}};
    o.dtypes = {DType::f32, DType::bf16};
    run_matrix(n, o, 100, no_views);
  }
  MatrixOptions o;
  o.meshes = {{2, 2}};
  o.shapes = {{8, 6}, {5, 3}};
  o.all_partial_ops = false;
  run_matrix(4, o, 300, no_views);
}

TEST(Redistribute, EveryDtypeGroup) {
  MatrixOptions o;
  o.meshes = {{3}};
  o.shapes = {{5, 4}};
  o.dtypes = {DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64};
  run_matrix(3, o, 100);
}

TEST(Redistribute, EveryPairOn2x2WithNestedOrders) {
  MatrixOptions o;
  o.meshes = {{2, 2}};
  o.shapes = {{8, 6}, {5, 3}, {1, 2}};
  o.all_partial_ops = false;  // sum on 2-d meshes here; every op is covered on 1-d meshes
  run_matrix(4, o, 300);
}

TEST(Redistribute, EveryPairOn2x3) {
  MatrixOptions o;
  o.meshes = {{2, 3}};
  o.shapes = {{7, 5}, {6, 6}};
  o.all_partial_ops = false;
  run_matrix(6, o, 200);
}

TEST(Redistribute, PartialOpsOn2dMesh) {
  MatrixOptions o;
  o.meshes = {{2, 2}};
  o.shapes = {{3, 5}};
  o.nested_orders = false;
  run_matrix(4, o, 200);
}

// Thousands of random (shape, mesh, source, target) cases; every thread draws the same sequence.
TEST(Redistribute, RandomizedProperty) {
  const int kWorld = 4;
  std::atomic<int64_t> checked{0};
  std::mutex mu;
  std::vector<std::string> failures;
  run_threads(kWorld, [&](CommunicatorPtr world) {
    std::mt19937_64 rng(1234);
    std::vector<std::vector<int64_t>> meshes = {{4}, {2, 2}, {4, 1}, {1, 4}};
    std::vector<DeviceMesh> built;
    for (auto& m : meshes) built.push_back(DeviceMesh::create(world, Device::cpu(), m));
    for (int iter = 0; iter < 6000; ++iter) {
      const DeviceMesh& mesh = built[rng() % built.size()];
      int64_t ndim = 1 + int64_t(rng() % 3);
      Shape shape;
      for (int64_t d = 0; d < ndim; ++d) shape.push_back(int64_t(rng() % 8));
      auto specs = testing::candidate_specs(ndim, mesh.ndim(), true, true);
      const ShardingSpec& src = specs[rng() % specs.size()];
      const ShardingSpec& dst = specs[rng() % specs.size()];
      DType dtype = (rng() % 3 == 0) ? DType::bf16 : DType::f32;
      if (src.has_mixed_partial() || testing::expect_unsupported(src, dst)) continue;
      Tensor full = testing::case_tensor(shape, dtype, uint64_t(iter));
      try {
        DTensor y = distribute_tensor(full, mesh, src.placements(), src.shard_order()).redistribute(dst);
        Tensor back = y.full_tensor();
        if (!equal(back, full)) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back(shape_str(shape) + " " + src.to_string() + " -> " + dst.to_string());
        }
        if (world->rank() == 0) ++checked;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(shape_str(shape) + " " + src.to_string() + " -> " + dst.to_string() + ": " + e.what());
      }
    }
  });
  for (size_t i = 0; i < failures.size() && i < 10; ++i) ADD_FAILURE() << failures[i];
  std::printf("%lld random redistributions checked\n", (long long)checked.load());
  EXPECT_GT(checked.load(), 2000);
}

using Check = std::function<void(bool ok, const std::string& what)>;

// Runs fn on 4 ranks with the 2x2 mesh "big" (dp, tp), the 2-rank mesh "small" (ranks 3 and 1) and a thread-safe
// check; the failures (the first ten, with their ranks) are reported once every rank is done.
void on_big_and_small(
    const std::function<void(const DeviceMesh& big, const DeviceMesh& small, const Check& check)>& fn) {
  std::mutex mu;
  std::vector<std::string> failures;
  run_threads(4, [&](CommunicatorPtr world) {
    DeviceMesh big = DeviceMesh::create(world, Device::cpu(), {2, 2}, {"dp", "tp"});
    DeviceMesh small = DeviceMesh::create(world, Device::cpu(), {2}, {"x"}, {3, 1});  // ranks 3 and 1
    fn(big, small, [&](bool ok, const std::string& what) {
      if (ok) return;
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back("rank " + std::to_string(world->rank()) + ": " + what);
    });
  });
  for (size_t i = 0; i < failures.size() && i < 10; ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty());
}

TEST(Redistribute, CrossMeshToSubMeshAndBack) {
  Tensor full = testing::case_tensor({7, 6}, DType::f32, 99);
  on_big_and_small([&](const DeviceMesh& big, const DeviceMesh& small, const Check& check) {
    for (auto src : {std::vector<Placement>{Shard{0}, Shard{1}},
                     {Replicate{}, Shard{0}},
                     {Partial{}, Shard{1}},
                     {Shard{1}, Partial{ReduceOp::kMax}}}) {
      for (auto dst : {std::vector<Placement>{Shard{0}}, {Shard{1}}, {Replicate{}}, {Partial{}}}) {
        DTensor x = distribute_tensor(full, big, src);
        DTensor y = x.redistribute(small, dst);
        check(y.mesh() == small, "result is on the target mesh");
        if (small.is_member())
          check(equal(y.full_tensor(), full), to_string(src) + " -> small " + to_string(dst));
        else
          check(y.to_local().numel() == 0, "non-member holds nothing");
        DTensor z = y.redistribute(big, {Shard{1}, Replicate{}});
        check(equal(z.full_tensor(), full), "back to the 2x2 mesh from " + to_string(dst));
      }
    }
  });
}

// redistribute_like: to another DTensor's mesh, placements and shard order (same mesh and cross-mesh), on uneven and
// empty shards; the value is the reference's (the full tensor made on one process), and a tensor already in that
// layout comes back as itself.
TEST(Redistribute, LikeAnotherTensorsLayout) {
  on_big_and_small([&](const DeviceMesh& big, const DeviceMesh& small, const Check& check) {
    const std::vector<std::vector<Placement>> layouts = {{Shard{0}, Shard{1}},
                                                         {Replicate{}, Shard{0}},
                                                         {Partial{}, Shard{1}},
                                                         {Shard{0}, Shard{0}},
                                                         {Replicate{}, Replicate{}}};
    for (const Shape& shape : {Shape{7, 5}, Shape{2, 3}, Shape{0, 4}}) {  // uneven, empty shards, empty
      Tensor full = testing::case_tensor(shape, DType::f32, 17);
      for (const auto& src : layouts) {
        DTensor x = distribute_tensor(full, big, src);
        const std::string from = shape_str(shape) + " " + to_string(src);
        check(x.redistribute_like(x).to_local().storage() == x.to_local().storage(), from + ": itself, no copy");
        for (const auto& dst : layouts) {
          if (std::holds_alternative<Partial>(dst[0])) continue;  // S -> P is no redistribution (the docs)
          // The nested order (tp's shard of dim 0 before dp's) only where both dims shard dim 0.
          ShardOrder order;
          if (dst[0] == Placement{Shard{0}} && dst[1] == Placement{Shard{0}}) order = {{0, {1, 0}}};
          DTensor like = distribute_tensor(full, big, dst).redistribute(dst, order);
          DTensor y = x.redistribute_like(like);
          check(y.mesh() == big && y.spec() == like.spec(), from + " -> " + to_string(dst) + ": the layout");
          check(equal(y.full_tensor(), full), from + " -> " + to_string(dst) + ": the value");
        }
        for (auto dst : {std::vector<Placement>{Shard{0}}, {Shard{1}}, {Replicate{}}}) {
          DTensor like = distribute_tensor(full, big, {Replicate{}, Replicate{}}).redistribute(small, dst);
          DTensor y = x.redistribute_like(like);
          check(y.mesh() == small && y.placements() == dst, from + " -> small " + to_string(dst) + ": the layout");
          if (small.is_member()) check(equal(y.full_tensor(), full), from + " -> small " + to_string(dst));
        }
      }
    }
  });
}

TEST(Redistribute, AsyncHandleYieldsTheSameResult) {
  Tensor full = testing::case_tensor({9, 4}, DType::f32, 5);
  std::atomic<int> ok{0};
  run_threads(2, [&](CommunicatorPtr world) {
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2});
    DTensor x = distribute_tensor(full, mesh, {Shard{0}});
    RedistributeHandle h = x.redistribute_async({Replicate{}});
    Tensor other = Tensor::ones({3});  // compute while the all-gather is in flight
    DTensor y = h.wait();
    if (equal(y.to_local(), full) && h.is_completed() && other.numel() == 3) ++ok;
  });
  EXPECT_EQ(ok.load(), 2);
}

TEST(Redistribute, AsyncHandleOutlivesItsSource) {
  // The DTensor redistributed may go before wait(): the plan's first step still reads its block, which the handle
  // holds. Its memory is not reused meanwhile: blocks of the same size, allocated and scribbled over after the
  // source is gone, land elsewhere.
  Tensor full = testing::case_tensor({12, 10}, DType::f32, 21);
  std::atomic<int> ok{0};
  run_threads(4, [&](CommunicatorPtr world) {
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 2});
    RedistributeHandle h, same;  // a two-step plan, and one with no step (the result is the input itself)
    Shape local_shape;
    {
      DTensor x = distribute_tensor(full, mesh, {Shard{0}, Shard{1}});
      local_shape = x.to_local().shape();
      h = x.redistribute_async({Replicate{}, Shard{0}});
      same = x.redistribute_async({Shard{0}, Shard{1}});
    }
    std::vector<Tensor> scribbles;
    for (int i = 0; i < 4; ++i) scribbles.push_back(Tensor::full(local_shape, -1.0));
    DTensor y = h.wait();
    DTensor z = same.wait();
    if (equal(y.full_tensor(), full) && equal(z.full_tensor(), full)) ++ok;
  });
  EXPECT_EQ(ok.load(), 4);
}

TEST(Redistribute, DroppedAsyncHandleStillCompletesEveryStep) {
  // A handle dropped without wait() finishes its plan (two all-gathers here) before its buffers are released, so
  // the ranks stay in step and the next redistribution is exact.
  Tensor full = testing::case_tensor({9, 7}, DType::f32, 11);
  std::atomic<int> ok{0};
  run_threads(4, [&](CommunicatorPtr world) {
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 2});
    DTensor x = distribute_tensor(full, mesh, {Shard{0}, Shard{1}});
    CommCounter counter(mesh);
    { RedistributeHandle h = x.redistribute_async({Replicate{}, Replicate{}}); }
    const int64_t gathers = counter.count(CollectiveKind::kAllGather, 0) + counter.count(CollectiveKind::kAllGather, 1);
    DTensor y = x.redistribute({Shard{1}, Shard{0}});
    if (gathers == 2 && equal(y.full_tensor(), full)) ++ok;
  });
  EXPECT_EQ(ok.load(), 4);
}

TEST(Redistribute, ShardZeroGatherWritesStraightIntoTheOutput) {
  // S(0) -> R with a contiguous block is one all-gather and nothing else: the result views the gather buffer.
  run_threads(3, [&](CommunicatorPtr world) {
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {3});
    Tensor full = testing::case_tensor({7, 3}, DType::f32, 3);
    DTensor x = distribute_tensor(full, mesh, {Shard{0}});
    CommCounter counter(mesh);
    DTensor y = x.redistribute({Replicate{}});
    EXPECT_EQ(counter.count(CollectiveKind::kAllGather, 0), 1);
    EXPECT_EQ(counter.total(), 1);
    EXPECT_TRUE(equal(y.to_local(), full));
    EXPECT_EQ(y.to_local().storage()->nbytes(), size_t(9 * 3 * 4));  // 3 padded chunks of 3 rows, no other copy
  });
}

TEST(DTensorApi, FromLocalInfersUnevenGlobalShapeAndChecks) {
  Tensor full = testing::case_tensor({7, 5}, DType::f32, 8);
  run_threads(4, [&](CommunicatorPtr world) {
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 2}, {"dp", "tp"});
    DTensor x = distribute_tensor(full, mesh, {Shard{0}, Shard{1}});
    DTensor y = DTensor::from_local(x.to_local(), mesh, {Shard{0}, Shard{1}});
    EXPECT_EQ(y.shape(), (Shape{7, 5}));
    EXPECT_TRUE(equal(y.full_tensor(), full));
    // Wrong global shape for this rank's block: a clear error on this rank.
    EXPECT_THROW(DTensor::from_local(x.to_local(), mesh, {Shard{0}, Shard{1}}, Shape{9, 5}), InvalidArgument);
    // One rank passes a bad local shape: with run_check every rank gets an error naming it.
    Tensor local = world->rank() == 2 ? Tensor::zeros({1, 1}) : x.to_local();
    FromLocalOptions o;
    o.run_check = true;
    try {
      DTensor::from_local(local, mesh, {Shard{0}, Shard{1}}, Shape{7, 5}, o);
      ADD_FAILURE() << "expected an error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2 has [1, 1]"), std::string::npos) << e.what();
    }
    EXPECT_THROW(DTensor::from_local(x.to_local(), mesh, {Shard{0}}), InvalidArgument);  // wrong placement count
    EXPECT_THROW(DTensor::from_local(x.to_local(), mesh, {Shard{2}, Replicate{}}), InvalidArgument);
    // With run_check, what every rank must agree on: the dtype, the placements, the global shape given.
    auto expect_named = [&](const std::function<void()>& f, const std::string& part) {
      try {
        f();
        ADD_FAILURE() << "expected an error containing " << part;
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      }
    };
    const bool odd = world->rank() == 1;
    Tensor ones = Tensor::ones({2});
    DeviceMesh flat = DeviceMesh::create(world, Device::cpu(), {4});
    expect_named([&] { DTensor::from_local(odd ? ones.to(DType::i32) : ones, flat, {Shard{0}}, Shape{8}, o); }, "i32");
    expect_named(
        [&] { DTensor::from_local(ones, flat, {odd ? Placement(Shard{0}) : Placement(Replicate{})}, std::nullopt, o); },
        "other placements");
    expect_named([&] { DTensor::from_local(ones, flat, {Replicate{}}, Shape{odd ? 4 : 2}, o); },
                 "another global shape");
  });
}

TEST(DTensorApi, MeshMismatchAcrossRanksIsAClearError) {
  run_threads(4, [&](CommunicatorPtr world) {
    std::vector<int64_t> sizes = world->rank() == 3 ? std::vector<int64_t>{4, 1} : std::vector<int64_t>{2, 2};
    try {
      DeviceMesh::create(world, Device::cpu(), sizes);
      ADD_FAILURE() << "expected an error";
    } catch (const InvalidArgument& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("different mesh"), std::string::npos) << msg;
      EXPECT_NE(msg.find(world->rank() == 3 ? "0, 1, 2" : "3"), std::string::npos) << msg;
    }
    EXPECT_THROW(DeviceMesh::create(world, Device::cpu(), {3}), InvalidArgument);  // 3 ranks of a world of 4
  });
}

TEST(DTensorApi, DistributeFromSourceRankAndSubMeshes) {
  Tensor full = testing::case_tensor({6, 4}, DType::i64, 4);
  run_threads(4, [&](CommunicatorPtr world) {
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 2}, {"dp", "tp"});
    // Rank 2 holds the data; the others pass its shape and dtype.
    DTensor x = world->rank() == 2
                    ? distribute_tensor(full, mesh, {Replicate{}, Shard{1}}, {}, 2)
                    : distribute_tensor(full.shape(), full.dtype(), mesh, {Replicate{}, Shard{1}}, {}, 2);
    EXPECT_TRUE(equal(x.full_tensor(), full));
    DeviceMesh tp = mesh["tp"];
    EXPECT_EQ(tp.size(), 2);
    EXPECT_EQ(tp.coordinate()[0], mesh.coordinate()[1]);
    DTensor t = DTensor::from_local(x.to_local(), tp, {Shard{1}});
    EXPECT_TRUE(equal(t.full_tensor(), full));
    DeviceMesh flat = mesh.flatten();
    EXPECT_EQ(flat.ndim(), 1);
    // A nested shard order keyed by a negative dim, as negative Shard dims are: the same layout as dim 1.
    DTensor nested = distribute_tensor(full, mesh, {Shard{-1}, Shard{-1}}, ShardOrder{{-1, {1, 0}}});
    DTensor same = distribute_tensor(full, mesh, {Shard{1}, Shard{1}}, ShardOrder{{1, {1, 0}}});
    EXPECT_TRUE(equal(nested.to_local(), same.to_local()));
    EXPECT_TRUE(equal(nested.full_tensor(), full));
    EXPECT_THROW(distribute_tensor(full, mesh, {Shard{1}, Shard{1}}, ShardOrder{{1, {1, 0}}, {-1, {0, 1}}}),
                 InvalidArgument);
    // More dims than the kernels move: refused when the DTensor is made, not at its first redistribution.
    EXPECT_THROW(distribute_tensor(Tensor::zeros(Shape(9, 1)), mesh, {Replicate{}, Replicate{}}), InvalidArgument);
    // Braced name lists, as in PyTorch (mesh["dp", "tp"]): the whole mesh, and its two dims flattened into one.
    EXPECT_EQ((mesh[{"dp", "tp"}].ndim()), 2);
    DeviceMesh dp_tp = mesh.flatten({"dp", "tp"}, "dp_tp");
    EXPECT_EQ(dp_tp.ndim(), 1);
    EXPECT_EQ(dp_tp.size(), 4);
    DTensor f = distribute_tensor(full, flat, {Shard{0}});
    EXPECT_TRUE(equal(f.full_tensor(), full));
    EXPECT_NE(x.describe().find("placements R,S(1)"), std::string::npos) << x.describe();
  });
}

// The table's rows as whitespace-separated tokens.
std::vector<std::vector<std::string>> table_tokens(const std::string& s) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(s);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::vector<std::string> row;
    for (std::string w; words >> w;) row.push_back(w);
    rows.push_back(row);
  }
  return rows;
}

TEST(Visualize, TableNamesTheRanksOfEachBlock) {
  MeshShape mesh({2, 3}, {"dp", "tp"});
  auto rows = table_tokens(visualize_sharding({7, 5}, mesh, ShardingSpec::parse("S(0),S(1)")));
  // Rows 0:4 / 4:7 by dp, cols 0:2, 2:4, 4:5 by tp (torch.chunk): rank (i, j) = 3i + j.
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[1], (std::vector<std::string>{"cols", "0:2", "cols", "2:4", "cols", "4:5"}));
  EXPECT_EQ(rows[2], (std::vector<std::string>{"rows", "0:4", "r0", "r1", "r2"}));
  EXPECT_EQ(rows[3], (std::vector<std::string>{"rows", "4:7", "r3", "r4", "r5"}));
  auto r = table_tokens(visualize_sharding({4}, MeshShape({2}), ShardingSpec::parse("R")));
  EXPECT_EQ(r[1], (std::vector<std::string>{"elems", "0:4", "r0,r1"}));
  // An empty shard holds nothing and is not listed: 2 rows over 3 ranks.
  auto e = table_tokens(visualize_sharding({2}, MeshShape({3}), ShardingSpec::parse("S(0)")));
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[2], (std::vector<std::string>{"elems", "1:2", "r1"}));
}

}  // namespace
}  // namespace dt
