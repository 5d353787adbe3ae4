// The FSDP engine (fsdp/param_group.h) on the thread backend, against references computed from the full tensors:
// shards of uneven and empty sizes, gather and refill of stable storages, the gradient reduction (average, sum,
// HSDP, mixed dtypes), the post-forward share (reshard_after_forward = k), and one collective per call.
#include <gtest/gtest.h>

#include "collectives/exchange.h"
#include "collectives/thread/thread_comm.h"
#include "dtensor/comm_counter.h"
#include "fsdp/param_group.h"
#include "kernels/ops/elementwise.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using fsdp::ParamGroup;

struct Param {
  std::string name;
  Shape shape;
  DType dtype;
};

// Uneven rows over 3 ranks (7 = 3 + 3 + 1), an empty shard (2 rows: 1 + 1 + 0), a 1-d parameter, an f64 one (a
// second run of the flat buffer and a second reduce dtype), and one with fewer rows than ranks.
const std::vector<Param> kParams{{"w", {7, 5}, DType::f32},
                                 {"b", {2, 4}, DType::f32},
                                 {"v", {9}, DType::f32},
                                 {"d", {4, 3}, DType::f64},
                                 {"one", {1, 6}, DType::f32}};

// Shards of whole pages on every rank but the last (Note [Gathering by mapping] in fsdp/mapped_path.cc): on one
// host these are mapped, not copied, all but "b" (rows of 16 bytes).
const std::vector<Param> kPageParams{{"w", {7, 1024}, DType::f32},  // 3 + 3 + 1 rows of 4 KiB over 3 ranks
                                     {"b", {2, 4}, DType::f32},
                                     {"v", {3072}, DType::f32},     // 1024 elements a rank
                                     {"e", {2, 1024}, DType::f32},  // 1 + 1 + 0 rows
                                     {"d", {4, 512}, DType::f64}};

Tensor value_of(const Param& p, uint64_t seed) { return Tensor::randn(p.shape, seed, p.dtype); }

std::vector<DTensor> replicated(const DeviceMesh& mesh, const std::vector<Param>& params) {
  std::vector<DTensor> out;
  for (size_t i = 0; i < params.size(); ++i)
    out.push_back(distribute_tensor(value_of(params[i], 100 + i), mesh,
                                    std::vector<Placement>(size_t(mesh.ndim()), Replicate{}), {}, std::nullopt));
  return out;
}

std::vector<std::string> names_of(const std::vector<Param>& params) {
  std::vector<std::string> n;
  for (const Param& p : params) n.push_back(p.name);
  return n;
}

// The gradient rank r hands in for parameter i.
Tensor grad_of(const Param& p, size_t i, int64_t rank) { return Tensor::randn(p.shape, 1000 + 17 * i + rank, p.dtype); }

// Runs fn on a 1-d mesh of n threads whose communicators take segmented blocks (the engine gathers straight into
// the parameters: Note [Gathering into the parameters]) or not (copy-in, flat all-gather, copy-out).
void on_threads(int n, bool segments, const std::function<void(const DeviceMesh&)>& fn) {
  run_threads(
      n, [&](CommunicatorPtr world) { fn(DeviceMesh::create(world, Device::cpu(), {n})); },
      ThreadCommOptions{.segments = segments});
}

// Unshards g with one all-gather and checks every parameter's gathered value against value_of(params[i], seed + i)
// and its storage against the one it had the first time (recorded in `storages` then).
void check_unshard(ParamGroup& g, const DeviceMesh& mesh, const std::vector<Param>& params, uint64_t seed,
                   std::vector<const Storage*>& storages) {
  CommCounter counter(mesh);
  g.unshard();
  g.wait_for_unshard();
  EXPECT_EQ(counter.count(CollectiveKind::kAllGather), 1) << "one all-gather per group, mapped or not";
  EXPECT_EQ(counter.total(), 1);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& u = g.unsharded_param(i).to_local();
    EXPECT_TRUE(equal(u, value_of(params[i], seed + i))) << params[i].name << " from seed " << seed;
    if (storages.size() == i) storages.push_back(u.storage().get());
    EXPECT_EQ(u.storage().get(), storages[i]) << "the storage keeps its identity";
  }
}

class FsdpGather : public testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Paths, FsdpGather, testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Segments" : "Flat"; });

TEST_P(FsdpGather, ShardsGatherAndRefillUnevenParameters) {
  on_threads(3, GetParam(), [](const DeviceMesh& mesh) {
    ParamGroup g("group", names_of(kParams), replicated(mesh, kParams), mesh, {});
    const int64_t r = mesh.local_rank(0);
    for (size_t i = 0; i < kParams.size(); ++i) {
      const Tensor full = value_of(kParams[i], 100 + i);
      const DTensor& s = g.sharded_param(i);
      EXPECT_EQ(s.placements(), (std::vector<Placement>{Shard{0}})) << kParams[i].name;
      const IndexRange rows = chunk_range(full.size(0), 3, r);
      EXPECT_TRUE(equal(s.to_local(), full.narrow(0, rows.begin, rows.size()))) << kParams[i].name;
      EXPECT_TRUE(equal(s.full_tensor(), full)) << kParams[i].name;
    }
    std::vector<const Storage*> storages;
    for (int round = 0; round < 2; ++round) {
      check_unshard(g, mesh, kParams, 100, storages);
      g.reshard();
      for (size_t i = 0; i < kParams.size(); ++i)
        EXPECT_TRUE(g.unsharded_param(i).to_local().storage()->is_released()) << kParams[i].name;
      EXPECT_THROW(g.unsharded_param(0).to_local().data_ptr(), Error);
    }
  });
}

// `factor`: set with set_gradient_divide_factor after the group was made (FSDP2's call) instead of in `options`.
void check_reduction(const DeviceMesh& mesh, const fsdp::FsdpOptions& options, double divide,
                     const std::vector<Param>& params = kParams,
                     std::optional<std::optional<double>> factor = std::nullopt) {
  ParamGroup g("group", names_of(params), replicated(mesh, params), mesh, options);
  if (factor) g.set_gradient_divide_factor(*factor);
  const int64_t n = mesh.size();
  const int64_t me = mesh.shape().linear_index(mesh.coordinate());
  const int64_t shard_size = mesh.size(mesh.ndim() - 1), shard_rank = mesh.local_rank(mesh.ndim() - 1);
  g.unshard(false);
  // Every parameter but "v" gets a gradient, "w" twice (the two are summed).
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == "v") continue;
    const DTensor& u = g.unsharded_param(i);
    Tensor grad = grad_of(params[i], i, me);
    g.accumulate_grad(i, DTensor::from_local(grad, u.mesh(), u.placements()));
    if (params[i].name == "w") g.accumulate_grad(i, DTensor::from_local(grad, u.mesh(), u.placements()));
  }
  g.reshard();
  g.reduce_grads();
  g.wait_for_reduce();
  for (size_t i = 0; i < params.size(); ++i) {
    const DTensor& got = g.sharded_grad(i);
    if (params[i].name == "v") {
      EXPECT_FALSE(got.defined()) << "no gradient was given";
      continue;
    }
    ASSERT_TRUE(got.defined()) << params[i].name;
    EXPECT_TRUE(got.spec() == g.sharded_param(i).spec()) << params[i].name;
    // Reference: the sum over every rank of the mesh (in f64), divided.
    Tensor want = Tensor::zeros(params[i].shape, DType::f64);
    for (int64_t r = 0; r < n; ++r) {
      Tensor term = grad_of(params[i], i, r).to(DType::f64);
      if (params[i].name == "w") term = kernels::mul_scalar(term, 2.0);
      want = kernels::add(want, term);
    }
    want = kernels::mul_scalar(want, 1.0 / divide);
    const IndexRange rows = chunk_range(params[i].shape[0], shard_size, shard_rank);
    want = want.narrow(0, rows.begin, rows.size()).to(params[i].dtype);
    EXPECT_TRUE(allclose(got.to_local(), want, 1e-5, 1e-6))
        << params[i].name << ": max difference " << max_abs_diff(got.to_local(), want);
  }
}

TEST_P(FsdpGather, ReduceScatterAveragesOrSumsUnevenGradients) {
  on_threads(3, GetParam(), [](const DeviceMesh& mesh) {
    check_reduction(mesh, {}, 3.0);                               // the default: the average
    check_reduction(mesh, {.gradient_divide_factor = 1.0}, 1.0);  // the sum
    check_reduction(mesh, {.gradient_divide_factor = 6.0}, 6.0);  // any factor
    // Set after the group was made: a factor, and back to the average.
    check_reduction(mesh, {}, 6.0, kParams, std::optional<double>(6.0));
    check_reduction(mesh, {.gradient_divide_factor = 1.0}, 3.0, kParams, std::optional<double>());
  });
}

// Note [A shard group of one]: one member gathers and reduces by copying, with no collective, to the same values
// (the average and the sum of one gradient are that gradient; a divide factor still divides).
TEST_P(FsdpGather, AShardGroupOfOneCopiesWithoutACollective) {
  on_threads(1, GetParam(), [](const DeviceMesh& mesh) {
    ParamGroup g("group", names_of(kParams), replicated(mesh, kParams), mesh, {});
    for (int round = 0; round < 2; ++round) {
      CommCounter counter(mesh);
      g.unshard();
      g.wait_for_unshard();
      for (size_t i = 0; i < kParams.size(); ++i)
        EXPECT_TRUE(equal(g.unsharded_param(i).to_local(), value_of(kParams[i], 100 + i))) << kParams[i].name;
      g.reshard();
      EXPECT_EQ(counter.count(CollectiveKind::kAllGather), GetParam() ? 0 : 1) << "segments: a copy, no collective";
    }
    CommCounter counter(mesh);
    check_reduction(mesh, {}, 1.0);
    check_reduction(mesh, {.gradient_divide_factor = 6.0}, 6.0);
    check_reduction(mesh, {}, 6.0, kParams, std::optional<double>(6.0));
    if (GetParam()) {
      EXPECT_EQ(counter.count(CollectiveKind::kReduceScatter), 0) << "segments: a copy, no collective";
    } else {
      EXPECT_GT(counter.count(CollectiveKind::kReduceScatter), 0) << "flat: the communicator's";
    }
  });
}

TEST(FsdpEngine, MappedShardsAreReadInPlaceAsTheyAreNow) {
  on_threads(3, true, [](const DeviceMesh& mesh) {
    ParamGroup g("group", names_of(kPageParams), replicated(mesh, kPageParams), mesh, {});
    const std::vector<bool> mapped{true, false, true, true, true};
    for (size_t i = 0; i < kPageParams.size(); ++i) EXPECT_EQ(g.is_mapped(i), mapped[i]) << kPageParams[i].name;
    const int64_t r = mesh.local_rank(0);
    std::vector<const Storage*> storages;
    for (int round = 0; round < 3; ++round) {
      // Round k gathers value_of(p, 100 + i + 10 k): before rounds 1 and 2 every rank writes its rows into its shard
      // in place, as the optimizer does.
      for (size_t i = 0; round > 0 && i < kPageParams.size(); ++i) {
        const IndexRange rows = chunk_range(kPageParams[i].shape[0], 3, r);
        Tensor shard = g.sharded_param(i).to_local();
        shard.copy_(value_of(kPageParams[i], 100 + i + 10 * round).narrow(0, rows.begin, rows.size()));
      }
      check_unshard(g, mesh, kPageParams, 100 + 10 * round, storages);
      g.reshard();
      for (size_t i = 0; i < kPageParams.size(); ++i)
        EXPECT_EQ(g.unsharded_param(i).to_local().storage()->is_released(), !mapped[i]) << kPageParams[i].name;
      // No rank writes its shard while a peer still reads it: in training the reduce-scatter orders the two.
      all_gather_ints(*mesh.comm(0), {round});
    }
    check_reduction(mesh, {}, 3.0, kPageParams);
  });
}

TEST(FsdpEngine, HsdpReducesOverShardThenReplicate) {
  op_test::on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    CommCounter counter(mesh);
    check_reduction(mesh, {}, 4.0);
    EXPECT_EQ(counter.count(CollectiveKind::kReduceScatter, 1), 2) << "one per reduce dtype (f32, f64), over shard";
    EXPECT_EQ(counter.count(CollectiveKind::kAllReduce, 0), 2) << "one per reduce dtype, over replicate";
  });
}

TEST_P(FsdpGather, MixedPrecisionGathersAndReducesInTheirDtypes) {
  on_threads(2, GetParam(), [](const DeviceMesh& mesh) {
    fsdp::FsdpOptions o;
    o.mp_policy.param_dtype = DType::bf16;
    o.mp_policy.reduce_dtype = DType::f32;
    const std::vector<Param> params{{"w", {5, 3}, DType::f32}};
    ParamGroup g("group", names_of(params), replicated(mesh, params), mesh, o);
    g.unshard(false);
    const Tensor& u = g.unsharded_param(0).to_local();
    EXPECT_EQ(u.dtype(), DType::bf16);
    EXPECT_TRUE(equal(u, value_of(params[0], 100).to(DType::bf16)));
    const int64_t me = mesh.local_rank(0);
    g.accumulate_grad(0, DTensor::from_local(grad_of(params[0], 0, me).to(DType::bf16), mesh, {Replicate{}}));
    g.reduce_grads();
    g.wait_for_reduce();
    const Tensor& got = g.sharded_grad(0).to_local();
    EXPECT_EQ(got.dtype(), DType::f32) << "the gradient shard has the parameter's dtype";
    Tensor want = kernels::mul_scalar(kernels::add(grad_of(params[0], 0, 0).to(DType::bf16).to(DType::f32),
                                                   grad_of(params[0], 0, 1).to(DType::bf16).to(DType::f32)),
                                      0.5);
    const IndexRange rows = chunk_range(5, 2, me);
    EXPECT_TRUE(allclose(got, want.narrow(0, rows.begin, rows.size()), 1e-6, 1e-7));
  });
}

TEST(FsdpEngine, ReshardAfterForwardKeepsAShareAndGathersOverFewerRanks) {
  op_test::on_mesh({4}, [](const DeviceMesh& mesh) {
    ParamGroup g("group", names_of(kParams), replicated(mesh, kParams), mesh, {.reshard_after_forward = int64_t(2)});
    g.unshard(false);
    g.reshard(/*post_forward=*/true);
    EXPECT_EQ(g.state(), ParamGroup::State::kPostForward);
    CommCounter counter;
    g.unshard(false);
    ASSERT_EQ(counter.count(CollectiveKind::kAllGather), 1);
    EXPECT_EQ(counter.records()[0].group_size, 2) << "the backward all-gather runs over 2 ranks";
    for (size_t i = 0; i < kParams.size(); ++i)
      EXPECT_TRUE(equal(g.unsharded_param(i).to_local(), value_of(kParams[i], 100 + i))) << kParams[i].name;
    g.reshard();
    EXPECT_EQ(g.state(), ParamGroup::State::kSharded);
  });
}

TEST(FsdpEngine, RejectsBadInput) {
  op_test::on_mesh({2}, [](const DeviceMesh& mesh) {
    auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
      try {
        f();
        ADD_FAILURE() << "expected an error containing '" << needle << "'";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    const std::vector<Param> one{{"w", {4, 2}, DType::f32}};
    // A divide factor that is not positive, set later: refused, the group unchanged.
    {
      ParamGroup g("g", {"w"}, replicated(mesh, one), mesh, {.gradient_divide_factor = 2.0});
      expect_error([&] { g.set_gradient_divide_factor(-1.0); }, "must be positive");
      expect_error([&] { g.set_gradient_divide_factor(0.0); }, "must be positive");
      EXPECT_EQ(g.options().gradient_divide_factor, std::optional<double>(2.0));
    }
    // Already sharded on the FSDP mesh.
    std::vector<DTensor> sharded{distribute_tensor(value_of(one[0], 1), mesh, {Shard{0}}, {}, std::nullopt)};
    expect_error([&] { ParamGroup g("g", {"w"}, sharded, mesh, {}); }, "already laid out as S(0)");
    // A scalar.
    std::vector<DTensor> scalar{distribute_tensor(Tensor::ones({}), mesh, {Replicate{}}, {}, std::nullopt)};
    expect_error([&] { ParamGroup g("g", {"s"}, scalar, mesh, {}); }, "is a scalar");
    // reshard_after_forward that does not divide the shard size.
    expect_error([&] { ParamGroup g("g", {"w"}, replicated(mesh, one), mesh, {.reshard_after_forward = int64_t(3)}); },
                 "must divide the shard size");
    // A mesh that is not related to the parameter's.
    DeviceMesh other = DeviceMesh::create(mesh.world(), mesh.device(), {2});
    expect_error([&] { ParamGroup g("g", {"w"}, replicated(other, one), mesh, {}); }, "does not come from");
  });
}

// f16 gradients: the divide factor is split before and after the sum (pre 2, post 2 for 4 ranks), so 4 x 20000
// (80000 > f16's 65504) never overflows: the mean comes back; a factor set later is split the same way.
TEST(FsdpEngine, HalfPrecisionReductionDividesBeforeAndAfter) {
  op_test::on_mesh({4}, [](const DeviceMesh& mesh) {
    fsdp::FsdpOptions o;
    o.mp_policy.param_dtype = DType::f16;
    const std::vector<Param> params{{"w", {4, 2}, DType::f32}};
    ParamGroup g("group", names_of(params), replicated(mesh, params), mesh, o);
    g.unshard(false);
    g.accumulate_grad(0, DTensor::from_local(Tensor::full({4, 2}, 20000.0, DType::f16), mesh, {Replicate{}}));
    g.reduce_grads();
    g.wait_for_reduce();
    const Tensor got = g.sharded_grad(0).to_local();
    EXPECT_EQ(got.dtype(), DType::f32);
    for (double v : got.to_vector()) EXPECT_EQ(v, 20000.0);
    // The split follows a factor set later: 1 sums (4 x 1000), 8 divides by 4 before and 2 after (4 x 1000 / 8).
    g.reshard();
    for (const auto& [factor, want] : {std::pair{1.0, 4000.0}, {8.0, 500.0}}) {
      g.set_gradient_divide_factor(factor);
      g.unshard(false);
      g.accumulate_grad(0, DTensor::from_local(Tensor::full({4, 2}, 1000.0, DType::f16), mesh, {Replicate{}}));
      g.reduce_grads();
      g.wait_for_reduce();
      for (double v : g.sharded_grad(0).to_local().to_vector()) EXPECT_EQ(v, want) << "factor " << factor;
      g.reshard();
    }
  });
}

// A gradient that is Partial over the tensor-parallel dim is reduced over tp in reduce_dtype (f32), not in the
// parameters' bf16.
TEST(FsdpEngine, TensorParallelGradientReductionUsesTheReduceDtype) {
  run_threads(4, [](CommunicatorPtr world) {
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 2}, {"dp", "tp"});
    fsdp::FsdpOptions o;
    o.mp_policy.param_dtype = DType::bf16;
    o.mp_policy.reduce_dtype = DType::f32;
    const Tensor w = Tensor::randn({6, 4}, 3);
    std::vector<DTensor> params{distribute_tensor(w, mesh["tp"], {Replicate{}}, {}, std::nullopt)};
    ParamGroup g("group", {"w"}, params, mesh["dp"], o);
    g.unshard(false);
    std::vector<DType> seen;
    const int id = add_collective_observer([&](const CollectiveEvent& e) {
      if (e.args->kind == CollectiveKind::kAllReduce) seen.push_back(e.args->dtype);
    });
    const Tensor part = Tensor::randn({6, 4}, 10 + world->rank()).to(DType::bf16);
    g.accumulate_grad(0, DTensor::from_local(part, mesh["tp"], {Partial{ReduceOp::kSum}}));
    remove_collective_observer(id);
    ASSERT_FALSE(seen.empty());
    for (DType d : seen) EXPECT_EQ(d, DType::f32);
  });
}

}  // namespace
}  // namespace dt
