// Layout math, exhaustively: every small global shape, mesh, placement combination and shard order. References are
// computed here from the definition of torch.chunk, independently of the library.
#include "placement/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <set>

#include "core/error.h"

namespace dt {
namespace {

// torch.chunk(x, k) on a dim of size n, as the PyTorch docs define it: chunks of ceil(n / k) elements taken from the
// front, the last one possibly shorter, and fewer than k chunks when they run out. DTensor gives the ranks beyond the
// last chunk an empty shard. Returns (offset, size) for every one of the k ranks; an empty shard starts at n.
std::vector<std::pair<int64_t, int64_t>> torch_chunk(int64_t n, int64_t k) {
  std::vector<std::pair<int64_t, int64_t>> chunks;
  const int64_t split = n == 0 ? 0 : (n + k - 1) / k;
  for (int64_t start = 0; start < n; start += split) chunks.emplace_back(start, std::min(split, n - start));
  while (static_cast<int64_t>(chunks.size()) < k) chunks.emplace_back(n, 0);
  return chunks;
}

// Reference block of tensor dim d at coord: apply torch_chunk for each splitter, outermost first.
std::pair<int64_t, int64_t> reference_range(int64_t n, const std::vector<int64_t>& order,
                                            const std::vector<int64_t>& mesh_sizes, const std::vector<int64_t>& coord) {
  int64_t begin = 0;
  int64_t size = n;
  for (int64_t m : order) {
    const auto [off, len] =
        torch_chunk(size, mesh_sizes[static_cast<size_t>(m)])[static_cast<size_t>(coord[static_cast<size_t>(m)])];
    begin += off;
    size = len;
  }
  return {begin, size};
}

// Every spec for a tensor of `tdim` dims on a mesh of `mdim` dims: each mesh dim S(d), R or P(sum), and every shard
// order of every tensor dim.
std::vector<ShardingSpec> all_specs(int64_t tdim, int64_t mdim) {
  std::vector<Placement> choices = {Replicate{}, Partial{ReduceOp::kSum}};
  for (int64_t d = 0; d < tdim; ++d) choices.push_back(Shard{d});
  std::vector<ShardingSpec> out;
  std::vector<size_t> pick(static_cast<size_t>(mdim), 0);
  while (true) {
    std::vector<Placement> ps;
    for (size_t i : pick) ps.push_back(choices[i]);
    ShardOrder base;
    for (size_t m = 0; m < ps.size(); ++m) {
      if (const auto* s = std::get_if<Shard>(&ps[m])) base[s->dim].push_back(static_cast<int64_t>(m));
    }
    // Cartesian product of the permutations of every tensor dim's splitters.
    std::vector<ShardOrder> orders = {base};
    for (const auto& [d, v] : base) {
      std::vector<ShardOrder> next;
      std::vector<int64_t> perm = v;
      std::sort(perm.begin(), perm.end());
      do {
        for (ShardOrder o : orders) {
          o[d] = perm;
          next.push_back(o);
        }
      } while (std::next_permutation(perm.begin(), perm.end()));
      orders = next;
    }
    for (const ShardOrder& o : orders) out.emplace_back(ps, o);
    size_t i = 0;
    while (i < pick.size() && ++pick[i] == choices.size()) pick[i++] = 0;
    if (i == pick.size()) break;
  }
  return out;
}

std::vector<std::vector<int64_t>> all_coords(const MeshShape& mesh) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < mesh.numel(); ++i) out.push_back(mesh.coordinate_at_index(i));
  return out;
}

struct Stats {
  int64_t configs = 0;
  int64_t blocks = 0;
  int64_t nested = 0;
  int64_t empty_blocks = 0;
  int64_t uneven = 0;
};

// Checks one (global shape, mesh, spec): blocks match the reference, and for every fixed coordinate of the non-Shard
// mesh dims the blocks tile the tensor exactly once; group_ranges match the union of the members' blocks.
void check_config(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec, Stats* stats) {
  const int64_t numel = shape_numel(global);
  const size_t nd = global.size();
  const auto coords = all_coords(mesh);
  std::vector<int> count(static_cast<size_t>(numel) * static_cast<size_t>(mesh.numel()), 0);
  std::vector<LocalLayout> layouts;
  bool uneven = false;
  for (const auto& c : coords) {
    const LocalLayout l = local_layout(global, mesh, spec, c);
    layouts.push_back(l);
    ASSERT_EQ(l.shape.size(), nd);
    for (size_t d = 0; d < nd; ++d) {
      const auto [off, len] = reference_range(global[d], spec.splitters(static_cast<int64_t>(d)), mesh.sizes(), c);
      ASSERT_EQ(l.shape[d], len) << "spec " << spec << " mesh " << mesh << " global " << shape_str(global) << " dim "
                                 << d << " coord " << shape_str(c);
      ASSERT_EQ(l.offset[d], off) << "spec " << spec << " mesh " << mesh << " global " << shape_str(global);
    }
    if (l.shape != layouts.front().shape) uneven = true;
    stats->empty_blocks += l.numel() == 0;
    // Replica group id: the coordinate restricted to non-Shard mesh dims.
    int64_t replica = 0;
    for (int64_t m = 0; m < mesh.ndim(); ++m) {
      if (!is_shard(spec[m])) replica = replica * mesh.sizes()[static_cast<size_t>(m)] + c[static_cast<size_t>(m)];
    }
    // Count every global index the block covers.
    std::vector<int64_t> idx(nd, 0);
    if (l.numel() == 0) continue;
    while (true) {
      int64_t flat = 0;
      for (size_t d = 0; d < nd; ++d) flat = flat * global[d] + l.offset[d] + idx[d];
      ++count[static_cast<size_t>(replica * numel + flat)];
      size_t d = nd;
      while (d > 0 && ++idx[d - 1] == l.shape[d - 1]) idx[--d] = 0;
      if (d == 0) break;
    }
  }
  int64_t replicas = 1;
  for (int64_t m = 0; m < mesh.ndim(); ++m) {
    if (!is_shard(spec[m])) replicas *= mesh.sizes()[static_cast<size_t>(m)];
  }
  for (int64_t r = 0; r < replicas; ++r) {
    for (int64_t i = 0; i < numel; ++i) {
      ASSERT_EQ(count[static_cast<size_t>(r * numel + i)], 1)
          << "index " << i << " of " << shape_str(global) << " replica " << r << " spec " << spec << " mesh " << mesh;
    }
  }
  EXPECT_EQ(is_evenly_sharded(global, mesh, spec), !uneven) << spec << " " << mesh << " " << shape_str(global);
  EXPECT_EQ(max_local_shape(global, mesh, spec), [&] {
    Shape mx(nd, 0);
    for (const auto& l : layouts)
      for (size_t d = 0; d < nd; ++d) mx[d] = std::max(mx[d], l.shape[d]);
    return mx;
  }());

  // group_ranges along each single mesh dim: the union of the members' blocks, per dim.
  for (int64_t m = 0; m < mesh.ndim(); ++m) {
    for (size_t ci = 0; ci < coords.size(); ++ci) {
      if (coords[ci][static_cast<size_t>(m)] != 0) continue;
      const auto groups = group_ranges(global, mesh, spec, coords[ci], {m});
      for (size_t d = 0; d < nd; ++d) {
        std::set<int64_t> expect;
        for (int64_t r : mesh.ranks_along(m, coords[ci])) {
          const LocalLayout& l = layouts[static_cast<size_t>(r)];
          for (int64_t x = 0; x < l.shape[d]; ++x) expect.insert(l.offset[d] + x);
        }
        std::set<int64_t> got;
        int64_t prev_end = -1;
        for (const IndexRange& rg : groups[d]) {
          ASSERT_GT(rg.size(), 0);
          ASSERT_GT(rg.begin, prev_end);  // sorted, disjoint, merged
          prev_end = rg.end;
          for (int64_t x = rg.begin; x < rg.end; ++x) got.insert(x);
        }
        ASSERT_EQ(got, expect) << "group along mesh dim " << m << " spec " << spec << " mesh " << mesh << " dim " << d;
        // group_member_sizes: member i's size along d, from any coordinate of the group.
        std::vector<int64_t> want;
        for (int64_t r : mesh.ranks_along(m, coords[ci])) want.push_back(layouts[static_cast<size_t>(r)].shape[d]);
        std::vector<int64_t> from = coords[ci];
        from[static_cast<size_t>(m)] = mesh.sizes()[static_cast<size_t>(m)] - 1;
        ASSERT_EQ(group_member_sizes(global, mesh, spec, from, m, static_cast<int64_t>(d)), want)
            << "member sizes along mesh dim " << m << " spec " << spec << " mesh " << mesh << " dim " << d;
      }
    }
  }
  ++stats->configs;
  stats->blocks += static_cast<int64_t>(coords.size());
  stats->nested += !spec.has_default_order();
  stats->uneven += uneven;
}

TEST(Layout, ChunkRuleMatchesTorchChunk) {
  // The example of the docs: 5 over 4 gives 2, 2, 1, 0.
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < 4; ++i) sizes.push_back(chunk_range(5, 4, i).size());
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2, 1, 0}));
  for (int64_t n = 0; n <= 40; ++n) {
    for (int64_t k = 1; k <= 12; ++k) {
      const auto ref = torch_chunk(n, k);
      for (int64_t i = 0; i < k; ++i) {
        const IndexRange r = chunk_range(n, k, i);
        EXPECT_EQ(r.size(), ref[static_cast<size_t>(i)].second) << n << "/" << k << " #" << i;
        if (r.size() > 0) {
          EXPECT_EQ(r.begin, ref[static_cast<size_t>(i)].first);
        }
      }
    }
  }
}

TEST(Layout, ChunkRuleNearInt64Max) {
  // Found by the placement_parsers fuzz target (dtplan on a dim of INT64_MAX elements): (i + 1) * chunk overflowed.
  // The reference is exact 128-bit arithmetic of the torch.chunk rule.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (int64_t n : {kMax, kMax - 1, kMax - 2, kMax / 2 + 1, (int64_t{1} << 62) + 3}) {
    for (int64_t k : {int64_t{2}, int64_t{3}, int64_t{7}, int64_t{1} << 20, kMax}) {
      const __int128 c = (static_cast<__int128>(n) + k - 1) / k;
      for (int64_t i : {int64_t{0}, int64_t{1}, k / 2, k - 2, k - 1}) {
        if (i < 0) continue;
        const IndexRange r = chunk_range(n, k, i);
        EXPECT_EQ(r.begin, static_cast<int64_t>(std::min<__int128>(i * c, n))) << n << "/" << k << " #" << i;
        EXPECT_EQ(r.end, static_cast<int64_t>(std::min<__int128>((i + 1) * c, n))) << n << "/" << k << " #" << i;
      }
    }
  }
  EXPECT_EQ(ceil_div(kMax, 2), int64_t{1} << 62);
  EXPECT_EQ(ceil_div(kMax, 1), kMax);
  EXPECT_EQ(ceil_div(0, 5), 0);
}

TEST(Layout, OneDimMeshEqualsTorchChunk) {
  for (int64_t k = 1; k <= 5; ++k) {
    const MeshShape mesh({k});
    for (int64_t n = 0; n <= 9; ++n) {
      const auto ref = torch_chunk(n, k);
      for (int64_t i = 0; i < k; ++i) {
        const LocalLayout l = local_layout({n}, mesh, ShardingSpec({Shard{0}}), {i});
        EXPECT_EQ(l.shape, Shape{ref[static_cast<size_t>(i)].second}) << n << "/" << k << " #" << i;
        EXPECT_EQ(l.offset, Shape{ref[static_cast<size_t>(i)].first}) << n << "/" << k << " #" << i;
        EXPECT_EQ(local_layout({n}, mesh, ShardingSpec({Replicate{}}), {i}), (LocalLayout{{n}, {0}}));
      }
      // 2-d tensor sharded on dim 1.
      for (int64_t i = 0; i < k; ++i) {
        const LocalLayout l = local_layout({3, n}, mesh, ShardingSpec({Shard{1}}), {i});
        EXPECT_EQ(l.shape, (Shape{3, ref[static_cast<size_t>(i)].second}));
      }
    }
  }
}

TEST(Layout, ExhaustiveTiling) {
  Stats stats;
  std::vector<MeshShape> meshes;
  for (int64_t k = 1; k <= 5; ++k) meshes.emplace_back(std::vector<int64_t>{k});
  for (int64_t a = 1; a <= 3; ++a)
    for (int64_t b = 1; b <= 3; ++b) meshes.emplace_back(std::vector<int64_t>{a, b});
  std::vector<Shape> shapes;
  for (int64_t n = 0; n <= 9; ++n) shapes.push_back({n});
  for (int64_t a = 0; a <= 9; ++a)
    for (int64_t b = 0; b <= 9; ++b) shapes.push_back({a, b});
  for (const MeshShape& mesh : meshes) {
    for (int64_t tdim = 1; tdim <= 2; ++tdim) {
      const std::vector<ShardingSpec> specs = all_specs(tdim, mesh.ndim());
      for (const Shape& global : shapes) {
        if (static_cast<int64_t>(global.size()) != tdim) continue;
        for (const ShardingSpec& spec : specs) {
          check_config(global, mesh, spec, &stats);
          if (testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
  // 3-d meshes with every order of three splitters of one dim (3! orders), on 1-d tensors.
  for (const MeshShape& mesh : {MeshShape({2, 2, 2}), MeshShape({2, 3, 2}), MeshShape({3, 1, 2})}) {
    const std::vector<ShardingSpec> specs = all_specs(1, 3);
    for (int64_t n = 0; n <= 13; ++n) {
      for (const ShardingSpec& spec : specs) {
        check_config({n}, mesh, spec, &stats);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
  EXPECT_GT(stats.configs, 15000);
  EXPECT_GT(stats.nested, 1000);
  EXPECT_GT(stats.empty_blocks, 1000);
  EXPECT_GT(stats.uneven, 1000);
  std::printf("layout: %lld configs, %lld blocks, %lld nested, %lld uneven, %lld empty blocks\n",
              static_cast<long long>(stats.configs), static_cast<long long>(stats.blocks),
              static_cast<long long>(stats.nested), static_cast<long long>(stats.uneven),
              static_cast<long long>(stats.empty_blocks));
}

TEST(Layout, NestedOrderExample) {
  // FSDP over dp (mesh dim 0) on top of TP over tp (mesh dim 1), both on tensor dim 0 of size 8: order [1, 0].
  const MeshShape mesh({2, 2}, {"dp", "tp"});
  const ShardingSpec strided = ShardingSpec::parse("S(0)[1],S(0)[0]");
  const ShardingSpec plain = ShardingSpec::parse("S(0),S(0)");
  // tp splits first: tp=0 holds [0, 4), tp=1 holds [4, 8); dp then splits each: (dp=1, tp=0) holds [2, 4).
  EXPECT_EQ(local_layout({8}, mesh, strided, {1, 0}), (LocalLayout{{2}, {2}}));
  EXPECT_EQ(local_layout({8}, mesh, strided, {0, 1}), (LocalLayout{{2}, {4}}));
  EXPECT_EQ(local_layout({8}, mesh, plain, {1, 0}), (LocalLayout{{2}, {4}}));
  EXPECT_EQ(local_layout({8}, mesh, plain, {0, 1}), (LocalLayout{{2}, {2}}));
  // The dp group through tp=0 holds [0, 4) together (dp is innermost: contiguous) ...
  EXPECT_EQ(group_ranges({8}, mesh, strided, {0, 0}, {0})[0], (std::vector<IndexRange>{{0, 4}}));
  // ... the tp group through dp=0 holds [0, 2) and [4, 6): tp is the outer splitter, so not contiguous.
  EXPECT_EQ(group_ranges({8}, mesh, strided, {0, 0}, {1})[0], (std::vector<IndexRange>{{0, 2}, {4, 6}}));
  EXPECT_EQ(group_ranges({8}, mesh, strided, {0, 0}, {0, 1})[0], (std::vector<IndexRange>{{0, 8}}));
  // Uneven: 7 over tp=2 gives 4, 3; dp splits 4 into 2, 2 and 3 into 2, 1.
  EXPECT_EQ(local_shape({7}, mesh, strided, {1, 1}), Shape{1});
  EXPECT_EQ(global_offset({7}, mesh, strided, {1, 1}), Shape{6});
  EXPECT_EQ(local_layout_of_rank({7}, mesh, strided, 2), (LocalLayout{{2}, {2}}));
  EXPECT_EQ(local_ranges({7}, mesh, strided, {1, 1}), (std::vector<IndexRange>{{6, 7}}));
}

TEST(Layout, ValidationErrors) {
  const MeshShape mesh({2, 3});
  EXPECT_THROW(local_layout({4}, mesh, ShardingSpec::parse("S(0)"), {0, 0}), InvalidArgument);
  try {
    local_layout({4}, mesh, ShardingSpec::parse("S(1),R"), {0, 0});
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("S(1),R"), std::string::npos) << e.what();
  }
  EXPECT_THROW(local_layout({4}, mesh, ShardingSpec::parse("S(0),R"), {0, 3}), InvalidArgument);
  EXPECT_THROW(local_layout({-1}, mesh, ShardingSpec::parse("S(0),R"), {0, 0}), InvalidArgument);
  EXPECT_THROW(local_layout_of_rank({4}, mesh, ShardingSpec::parse("S(0),R"), 6), InvalidArgument);
  EXPECT_THROW(group_ranges({4}, mesh, ShardingSpec::parse("S(0),R"), {0, 0}, {2}), InvalidArgument);
  EXPECT_THROW(group_member_sizes({4}, mesh, ShardingSpec::parse("S(0),R"), {0, 0}, 2, 0), InvalidArgument);
  EXPECT_THROW(group_member_sizes({4}, mesh, ShardingSpec::parse("S(0),R"), {0, 0}, 0, 1), InvalidArgument);
}

}  // namespace
}  // namespace dt
