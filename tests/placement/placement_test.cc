// Placements, MeshShape and ShardingSpec: printing/parsing round trips, hashing, validation errors.
#include "placement/placement.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_set>

#include "core/error.h"
#include "core/shape.h"
#include "placement/mesh_shape.h"
#include "placement/sharding_spec.h"

namespace dt {
namespace {

// Runs fn, expects exception type E whose message contains every needle.
template <typename E, typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    for (const std::string& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "message '" << e.what() << "' lacks '" << n << "'";
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct};

TEST(Placement, PrintsShortForms) {
  EXPECT_EQ(to_string(Placement{Shard{0}}), "S(0)");
  EXPECT_EQ(to_string(Placement{Shard{12}}), "S(12)");
  EXPECT_EQ(to_string(Placement{Replicate{}}), "R");
  EXPECT_EQ(to_string(Placement{Partial{ReduceOp::kSum}}), "P(sum)");
  EXPECT_EQ(to_string(Placement{Partial{ReduceOp::kAvg}}), "P(avg)");
  EXPECT_EQ(to_string(Placement{Partial{ReduceOp::kMax}}), "P(max)");
  EXPECT_EQ(to_string(Placement{Partial{ReduceOp::kMin}}), "P(min)");
  EXPECT_EQ(to_string(Placement{Partial{ReduceOp::kProduct}}), "P(product)");
  EXPECT_EQ(to_string(std::vector<Placement>{Shard{0}, Replicate{}, Partial{ReduceOp::kMax}}), "S(0),R,P(max)");
  std::ostringstream os;
  os << Placement{Shard{3}};
  EXPECT_EQ(os.str(), "S(3)");
}

TEST(Placement, ParsesShortAndLongForms) {
  EXPECT_EQ(parse_placement("S(1)"), Placement{Shard{1}});
  EXPECT_EQ(parse_placement("  Shard( 2 ) "), Placement{Shard{2}});
  EXPECT_EQ(parse_placement("S(-1)"), Placement{Shard{-1}});
  EXPECT_EQ(parse_placement("R"), Placement{Replicate{}});
  EXPECT_EQ(parse_placement("Replicate()"), Placement{Replicate{}});
  EXPECT_EQ(parse_placement("replicate"), Placement{Replicate{}});
  EXPECT_EQ(parse_placement("P"), Placement{Partial{ReduceOp::kSum}});
  EXPECT_EQ(parse_placement("Partial(avg)"), Placement{Partial{ReduceOp::kAvg}});
  EXPECT_EQ(parse_placement("P(prod)"), Placement{Partial{ReduceOp::kProduct}});
  EXPECT_EQ(parse_placement("P( MAX )"), Placement{Partial{ReduceOp::kMax}});
  EXPECT_EQ(parse_placements("S(0), R ,P(min)"),
            (std::vector<Placement>{Shard{0}, Replicate{}, Partial{ReduceOp::kMin}}));
}

TEST(Placement, RoundTripsEveryPlacement) {
  std::vector<Placement> all = {Replicate{}};
  for (int64_t d = 0; d < 5; ++d) all.push_back(Shard{d});
  for (ReduceOp op : kOps) all.push_back(Partial{op});
  for (const Placement& p : all) EXPECT_EQ(parse_placement(to_string(p)), p) << to_string(p);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<Placement> list(1 + rng() % 4);
    for (Placement& p : list) p = all[rng() % all.size()];
    EXPECT_EQ(parse_placements(to_string(list)), list);
  }
}

TEST(Placement, EqualityAndHash) {
  std::vector<Placement> all = {Replicate{}};
  for (int64_t d = 0; d < 4; ++d) all.push_back(Shard{d});
  for (ReduceOp op : kOps) all.push_back(Partial{op});
  std::unordered_set<Placement> set(all.begin(), all.end());
  EXPECT_EQ(set.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = 0; j < all.size(); ++j) EXPECT_EQ(all[i] == all[j], i == j);
    EXPECT_EQ(std::hash<Placement>()(all[i]), std::hash<Placement>()(Placement(all[i])));
    EXPECT_TRUE(set.count(all[i]));
  }
  EXPECT_NE(hash_placements({Shard{0}, Replicate{}}), hash_placements({Replicate{}, Shard{0}}));
  EXPECT_EQ(hash_placements({Shard{0}, Replicate{}}), hash_placements(parse_placements("S(0),R")));
}

TEST(Placement, ParseErrorsNameTheBadText) {
  expect_error<InvalidArgument>([] { parse_placement("X(0)"); }, {"X(0)"});
  expect_error<InvalidArgument>([] { parse_placement("S"); }, {"'S'", "tensor dim"});
  expect_error<InvalidArgument>([] { parse_placement("S(a)"); }, {"S(a)", "'a'"});
  expect_error<InvalidArgument>([] { parse_placement("S(1"); }, {"S(1"});
  expect_error<InvalidArgument>([] { parse_placement("R(1)"); }, {"R(1)"});
  expect_error<InvalidArgument>([] { parse_placement("P(median)"); }, {"P(median)", "'median'"});
  expect_error<InvalidArgument>([] { parse_placements(""); }, {"empty"});
  expect_error<InvalidArgument>([] { parse_placements("S(0),,R"); }, {"''"});
  expect_error<InvalidArgument>(
      [] {
        ShardingSpec({Replicate{}, Partial{static_cast<ReduceOp>(42)}});
      },
      {"mesh dim 1", "invalid reduce op"});
}

TEST(Placement, NormalizeWrapsNegativeDims) {
  EXPECT_EQ(normalize_placements({Shard{-1}, Replicate{}, Shard{-2}}, 3),
            (std::vector<Placement>{Shard{2}, Replicate{}, Shard{1}}));
  expect_error<InvalidArgument>(
      [] {
        normalize_placements({Replicate{}, Shard{3}}, 3);
      },
      {"S(3)", "mesh dim 1", "3 dims"});
  expect_error<InvalidArgument>([] { normalize_placements({Shard{-4}}, 3); }, {"S(-4)"});
}

TEST(MeshShape, CoordinatesAreRowMajor) {
  MeshShape mesh({2, 3, 4}, {"pp", "dp", "tp"});
  EXPECT_EQ(mesh.ndim(), 3);
  EXPECT_EQ(mesh.numel(), 24);
  EXPECT_EQ(mesh.size("dp"), 3);
  EXPECT_EQ(mesh.dim_index("tp"), 2);
  for (int64_t r = 0; r < 24; ++r) {
    const std::vector<int64_t> c = mesh.coordinate_of(r);
    EXPECT_EQ(c, (std::vector<int64_t>{r / 12, (r / 4) % 3, r % 4}));
    EXPECT_EQ(mesh.rank_at(c), r);
  }
  EXPECT_EQ(mesh.ranks_along(2, {1, 2, 0}), (std::vector<int64_t>{20, 21, 22, 23}));
  EXPECT_EQ(mesh.ranks_along(1, {1, 2, 3}), (std::vector<int64_t>{15, 19, 23}));
  EXPECT_EQ(mesh.ranks_along(0, {0, 1, 1}), (std::vector<int64_t>{5, 17}));
}

TEST(MeshShape, RefusesMoreRanksThanItCanList) {
  // Found by the placement_parsers fuzz target: 2^40 ranks passed the check and the rank list (8 TiB) was allocated.
  EXPECT_EQ(MeshShape({4096, 4096}).numel(), MeshShape::kMaxRanks);
  for (const std::vector<int64_t>& sizes :
       {std::vector<int64_t>{int64_t{1} << 40}, {4096, 4097}, {2, int64_t{1} << 23, 2}, {INT64_MAX, INT64_MAX}}) {
    try {
      MeshShape mesh(sizes);
      ADD_FAILURE() << "accepted mesh sizes " << shape_str(sizes);
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("16777216"), std::string::npos) << e.what();
    }
  }
}

TEST(MeshShape, CustomRanksSubMeshAndFlatten) {
  MeshShape mesh({2, 3}, {"dp", "tp"}, {10, 11, 12, 20, 21, 22});
  EXPECT_EQ(mesh.coordinate_of(21), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(mesh.rank_at({0, 2}), 12);
  EXPECT_TRUE(mesh.contains(20));
  EXPECT_FALSE(mesh.contains(1));
  EXPECT_EQ(mesh.ranks_along(0, {0, 2}), (std::vector<int64_t>{12, 22}));

  const MeshShape tp = mesh.sub_mesh(std::vector<std::string>{"tp"}, {1, 0});
  EXPECT_EQ(tp, MeshShape({3}, {"tp"}, {20, 21, 22}));
  const MeshShape dp = mesh.sub_mesh_of_rank({"dp"}, 11);
  EXPECT_EQ(dp, MeshShape({2}, {"dp"}, {11, 21}));
  EXPECT_EQ(dp.coordinate_of(21), (std::vector<int64_t>{1}));
  // Both dims, transposed: rank at (tp=i, dp=j) is the parent's (j, i).
  const MeshShape t = mesh.sub_mesh(std::vector<std::string>{"tp", "dp"}, {0, 0});
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(t.ranks(), (std::vector<int64_t>{10, 20, 11, 21, 12, 22}));

  const MeshShape flat = mesh.flatten(0, 1);
  EXPECT_EQ(flat, MeshShape({6}, {"dp_tp"}, {10, 11, 12, 20, 21, 22}));
  EXPECT_EQ(mesh.flatten({"dp", "tp"}, "world").names(), (std::vector<std::string>{"world"}));
  MeshShape m3({2, 2, 3});
  EXPECT_EQ(m3.flatten(1, 2), MeshShape({2, 6}));
  EXPECT_EQ(m3.flatten(1, 1), m3);
}

TEST(MeshShape, ValidationErrorsNameTheBadValue) {
  expect_error<InvalidArgument>([] { MeshShape({2, 0}); }, {"size 0", "positive"});
  expect_error<InvalidArgument>([] { MeshShape({-3}); }, {"-3"});
  expect_error<InvalidArgument>([] { MeshShape(std::vector<int64_t>{}); }, {"at least one dim"});
  expect_error<InvalidArgument>([] { MeshShape({2, 2}, {"dp"}); }, {"2 dims", "1 names"});
  expect_error<InvalidArgument>([] { MeshShape({2, 2}, {"dp", "dp"}); }, {"duplicate", "'dp'"});
  expect_error<InvalidArgument>([] { MeshShape({2, 2}, {}, {0, 1, 2}); }, {"4 ranks", "length 3"});
  expect_error<InvalidArgument>([] { MeshShape({2, 2}, {}, {0, 1, 2, 1}); }, {"duplicate rank 1"});
  expect_error<InvalidArgument>([] { MeshShape({2}, {}, {0, -1}); }, {"-1"});
  MeshShape mesh({2, 3}, {"dp", "tp"});
  expect_error<InvalidArgument>([&] { mesh.dim_index("pp"); }, {"'pp'", "dp, tp"});
  expect_error<InvalidArgument>([&] { mesh.sub_mesh(std::vector<std::string>{"ep"}, {0, 0}); }, {"'ep'"});
  expect_error<InvalidArgument>([&] { mesh.coordinate_of(6); }, {"rank 6"});
  expect_error<InvalidArgument>([&] { mesh.rank_at({2, 0}); }, {"[2, 0]"});
  expect_error<InvalidArgument>([&] { mesh.rank_at({0}); }, {"[0]"});
  expect_error<InvalidArgument>([&] { mesh.ranks_along(2, {0, 0}); }, {"mesh dim 2"});
  expect_error<InvalidArgument>([&] { mesh.flatten({"tp", "dp"}); }, {"contiguous"});
  expect_error<InvalidArgument>([] { MeshShape({2, 2}).flatten(0, 1, "x"); }, {"'x'", "unnamed"});
}

TEST(MeshShape, EqualityAndHash) {
  std::unordered_set<MeshShape> set;
  set.insert(MeshShape({2, 3}));
  set.insert(MeshShape({2, 3}, {"a", "b"}));
  set.insert(MeshShape({3, 2}));
  set.insert(MeshShape({2, 3}, {}, {5, 4, 3, 2, 1, 0}));
  set.insert(MeshShape({2, 3}, {}, {0, 1, 2, 3, 4, 5}));  // == MeshShape({2, 3})
  EXPECT_EQ(set.size(), 4u);
  EXPECT_EQ(MeshShape({2, 3}).to_string(), "mesh[2, 3]");
  EXPECT_EQ(MeshShape({2}, {"dp"}, {4, 7}).to_string(), "mesh[2](dp) ranks [4, 7]");
}

TEST(ShardingSpec, NormalizeShardOrderWrapsNegativeDims) {
  EXPECT_EQ(normalize_shard_order({{-1, {1, 0}}, {0, {2}}}, 3), (ShardOrder{{0, {2}}, {2, {1, 0}}}));
  expect_error<InvalidArgument>([] { normalize_shard_order({{3, {0}}}, 3); }, {"tensor dim 3", "3 dims"});
  expect_error<InvalidArgument>([] { normalize_shard_order({{-4, {0}}}, 3); }, {"tensor dim -4"});
  expect_error<InvalidArgument>([] { normalize_shard_order({{-1, {0}}, {2, {1}}}, 3); }, {"listed twice"});
}

TEST(ShardingSpec, DefaultAndExplicitOrders) {
  const ShardingSpec def({Shard{0}, Shard{0}});
  EXPECT_EQ(def.splitters(0), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(def.has_default_order());
  EXPECT_TRUE(def.is_innermost(1));
  EXPECT_FALSE(def.is_innermost(0));
  EXPECT_EQ(def.to_string(), "S(0),S(0)");

  const ShardingSpec fsdp_tp({Shard{0}, Shard{0}}, ShardOrder{{0, {1, 0}}});
  EXPECT_EQ(fsdp_tp.splitters(0), (std::vector<int64_t>{1, 0}));
  EXPECT_FALSE(fsdp_tp.has_default_order());
  EXPECT_TRUE(fsdp_tp.is_innermost(0));
  EXPECT_EQ(fsdp_tp.to_string(), "S(0)[1],S(0)[0]");
  EXPECT_NE(def, fsdp_tp);
  EXPECT_EQ(ShardingSpec::parse("S(0)[1],S(0)[0]"), fsdp_tp);
  EXPECT_EQ(ShardingSpec::parse("S(0)[0],S(0)[1]"), def);  // explicit default order prints without suffixes
  EXPECT_EQ(ShardingSpec({Shard{0}, Shard{0}}, ShardOrder{{0, {0, 1}}}), def);

  const ShardingSpec mixed = ShardingSpec::parse("S(1)[2],R,S(1)[0],S(0),S(1)[1]");
  EXPECT_EQ(mixed.splitters(1), (std::vector<int64_t>{2, 4, 0}));
  EXPECT_EQ(mixed.splitters(0), (std::vector<int64_t>{3}));
  EXPECT_EQ(mixed.splitters(2), (std::vector<int64_t>{}));
  EXPECT_EQ(mixed.to_string(), "S(1)[2],R,S(1)[0],S(0),S(1)[1]");
  EXPECT_EQ(mixed.min_tensor_ndim(), 2);

  // with_placement: a new Shard is the innermost splitter, removal keeps the others' order.
  const ShardingSpec a = fsdp_tp.with_placement(1, Replicate{});
  EXPECT_EQ(a.to_string(), "S(0),R");
  const ShardingSpec b = a.with_placement(1, Shard{0});
  EXPECT_EQ(b, def);
  EXPECT_EQ(ShardingSpec::parse("R,S(0)").with_placement(0, Shard{0}), fsdp_tp);
}

TEST(ShardingSpec, ParseWithTensorNdimNormalizes) {
  EXPECT_EQ(ShardingSpec::parse("S(-1),R", 3), ShardingSpec({Shard{2}, Replicate{}}));
  EXPECT_EQ(ShardingSpec::parse("S(-2)[1],S(0)[0]", 2), ShardingSpec({Shard{0}, Shard{0}}, ShardOrder{{0, {1, 0}}}));
  expect_error<InvalidArgument>([] { ShardingSpec::parse("S(2),R", 2); }, {"S(2)", "2 dims"});
  expect_error<InvalidArgument>([] { ShardingSpec::parse("S(-1),R"); }, {"S(-1)", "negative"});
  expect_error<InvalidArgument>([] { ShardingSpec({Shard{-1}}); }, {"S(-1)"});
}

TEST(ShardingSpec, RoundTripsAndHashes) {
  std::mt19937 rng(11);
  std::unordered_set<ShardingSpec> set;
  std::vector<ShardingSpec> specs;
  for (int trial = 0; trial < 500; ++trial) {
    const size_t k = 1 + rng() % 4;
    std::vector<Placement> ps(k);
    const ReduceOp op = kOps[rng() % 5];
    for (Placement& p : ps) {
      const int c = static_cast<int>(rng() % 5);
      p = c < 3 ? Placement{Shard{c % 2}} : c == 3 ? Placement{Replicate{}} : Placement{Partial{op}};
    }
    ShardOrder order;
    for (size_t m = 0; m < k; ++m) {
      if (const auto* s = std::get_if<Shard>(&ps[m])) order[s->dim].push_back(static_cast<int64_t>(m));
    }
    for (auto& [d, v] : order) std::shuffle(v.begin(), v.end(), rng);
    const ShardingSpec spec(ps, order);
    const std::string text = spec.to_string();
    const ShardingSpec back = ShardingSpec::parse(text);
    EXPECT_EQ(back, spec) << text;
    EXPECT_EQ(back.shard_order(), order) << text;
    EXPECT_EQ(std::hash<ShardingSpec>()(back), std::hash<ShardingSpec>()(spec));
    set.insert(spec);
    specs.push_back(spec);
  }
  // The set deduplicates exactly the equal specs.
  size_t distinct = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    bool seen = false;
    for (size_t j = 0; j < i && !seen; ++j) seen = specs[j] == specs[i];
    distinct += !seen;
  }
  EXPECT_EQ(set.size(), distinct);
  EXPECT_GT(distinct, 100u);
}

TEST(ShardingSpec, ValidationErrorsNameTheBadValue) {
  expect_error<InvalidArgument>([] { ShardingSpec({Shard{0}, Shard{0}}, ShardOrder{{0, {1}}}); }, {"[1]", "[0, 1]"});
  expect_error<InvalidArgument>([] { ShardingSpec({Shard{0}, Shard{0}}, ShardOrder{{0, {1, 1}}}); }, {"[1, 1]"});
  expect_error<InvalidArgument>(
      [] {
        ShardingSpec({Shard{0}, Replicate{}}, ShardOrder{{1, {1}}});
      },
      {"tensor dim 1", "[1]"});
  expect_error<InvalidArgument>([] { ShardingSpec::parse("S(0)[1],S(0)"); }, {"S(0)[1],S(0)", "tensor dim 0"});
  expect_error<InvalidArgument>([] { ShardingSpec::parse("S(0)[0],S(0)[0]"); }, {"0..1"});
  expect_error<InvalidArgument>([] { ShardingSpec::parse("S(0)[2],S(0)[0]"); }, {"0..1"});
  expect_error<InvalidArgument>([] { ShardingSpec::parse("R[0]"); }, {"R[0]", "only a Shard"});
  expect_error<InvalidArgument>([] { ShardingSpec::parse("S(0)[x]"); }, {"'x'"});
  expect_error<InvalidArgument>([] { ShardingSpec::parse("S(0)]"); }, {"S(0)]"});
  expect_error<InvalidArgument>([] { ShardingSpec::parse(""); }, {"empty"});
  expect_error<InvalidArgument>([] { ShardingSpec::parse("S(0),R").check_tensor_ndim(0); }, {"S(0),R", "0 dims"});
  expect_error<InvalidArgument>([] { ShardingSpec::parse("S(0),R").placement(2); }, {"mesh dim 2"});
}

TEST(ShardingSpec, PartialQueries) {
  EXPECT_FALSE(ShardingSpec::parse("S(0),R").has_partial());
  EXPECT_EQ(ShardingSpec::parse("S(0),R").partial_op(), std::nullopt);
  EXPECT_EQ(ShardingSpec::parse("P(max),P(max)").partial_op(), ReduceOp::kMax);
  EXPECT_TRUE(ShardingSpec::parse("P(sum),P(max)").has_mixed_partial());
  expect_error<Unsupported>([] { ShardingSpec::parse("P(sum),P(max)").partial_op(); }, {"P(sum),P(max)"});
  EXPECT_TRUE(ShardingSpec::replicated(3).is_replicated());
  EXPECT_EQ(ShardingSpec::replicated(2).to_string(), "R,R");
}

}  // namespace
}  // namespace dt
