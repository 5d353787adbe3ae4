#include "placement/transfer_plan.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace dt {

namespace {

bool intersect(const Box& a, const Box& b, Box* out) {
  out->resize(a.size());
  for (size_t d = 0; d < a.size(); ++d) {
    (*out)[d] = {std::max(a[d].begin, b[d].begin), std::min(a[d].end, b[d].end)};
    if ((*out)[d].begin >= (*out)[d].end) return false;
  }
  return true;
}

bool box_less(const Box& a, const Box& b) {
  return std::lexicographical_compare(
      a.begin(), a.end(), b.begin(), b.end(),
      [](const IndexRange& x, const IndexRange& y) { return x.begin != y.begin ? x.begin < y.begin : x.end < y.end; });
}

void check_plain(const ShardingSpec& spec, const char* which) {
  for (int64_t m = 0; m < spec.mesh_ndim(); ++m)
    DT_CHECK_ARG(!is_partial(spec[m]), "a transfer plan moves plain blocks, but the ", which, " spec ", spec,
                 " has a Partial placement on mesh dim ", m, " (reduce it or produce it locally: without_partial)");
}

}  // namespace

const std::vector<int32_t>& TransferPlan::involving(int64_t rank) const {
  static const std::vector<int32_t> kNone;
  return rank >= 0 && rank < int64_t(by_rank.size()) ? by_rank[size_t(rank)] : kNone;
}

ShardingSpec without_partial(const ShardingSpec& spec) {
  ShardingSpec out = spec;
  for (int64_t m = 0; m < spec.mesh_ndim(); ++m)
    if (is_partial(spec[m])) out = out.with_placement(m, Replicate{});
  return out;
}

TransferPlan plan_transfers_uncached(const MeshShape& src_mesh, const ShardingSpec& src, const MeshShape& dst_mesh,
                                     const ShardingSpec& dst, const Shape& global) {
  check_layout_args(global, src_mesh, src);
  check_layout_args(global, dst_mesh, dst);
  check_plain(src, "source");
  check_plain(dst, "target");

  // The distinct source blocks and their holders (Note [cross-mesh plan]).
  std::vector<std::pair<Box, std::vector<int64_t>>> blocks;
  for (int64_t r : src_mesh.ranks()) {
    Box b = local_ranges(global, src_mesh, src, src_mesh.coordinate_of(r));
    auto it = std::find_if(blocks.begin(), blocks.end(), [&](const auto& e) { return e.first == b; });
    if (it == blocks.end())
      blocks.push_back({std::move(b), {r}});
    else
      it->second.push_back(r);
  }
  std::sort(blocks.begin(), blocks.end(), [](const auto& x, const auto& y) { return box_less(x.first, y.first); });

  TransferPlan plan;
  const std::vector<int64_t>& dst_ranks = dst_mesh.ranks();
  for (size_t ti = 0; ti < dst_ranks.size(); ++ti) {
    const int64_t t = dst_ranks[ti];
    Box tbox = local_ranges(global, dst_mesh, dst, dst_mesh.coordinate_of(t));
    for (const auto& [sbox, holders] : blocks) {
      Box region;
      if (!intersect(sbox, tbox, &region)) continue;
      const bool holds = std::find(holders.begin(), holders.end(), t) != holders.end();
      const int64_t sender = holds ? t : holders[ti % holders.size()];
      plan.transfers.push_back({sender, t, sbox, tbox, std::move(region)});
    }
  }
  int64_t max_rank = -1;
  for (int64_t r : src_mesh.ranks()) max_rank = std::max(max_rank, r);
  for (int64_t r : dst_ranks) max_rank = std::max(max_rank, r);
  plan.by_rank.resize(size_t(max_rank + 1));
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    const BlockTransfer& x = plan.transfers[i];
    plan.by_rank[size_t(x.sender)].push_back(int32_t(i));
    if (x.receiver != x.sender) plan.by_rank[size_t(x.receiver)].push_back(int32_t(i));
  }
  return plan;
}

namespace {

struct TransferKey {
  MeshShape src_mesh;
  ShardingSpec src;
  MeshShape dst_mesh;
  ShardingSpec dst;
  Shape global;
  bool operator==(const TransferKey&) const = default;
};

struct TransferKeyHash {
  size_t operator()(const TransferKey& k) const noexcept {
    size_t h = std::hash<MeshShape>()(k.src_mesh);
    h = hash_mix(h, std::hash<ShardingSpec>()(k.src));
    h = hash_mix(h, std::hash<MeshShape>()(k.dst_mesh));
    h = hash_mix(h, std::hash<ShardingSpec>()(k.dst));
    for (int64_t s : k.global) h = hash_mix(h, std::hash<int64_t>()(s));
    return h;
  }
};

struct TransferCache {
  std::mutex mu;
  std::unordered_map<TransferKey, std::unique_ptr<TransferPlan>, TransferKeyHash> plans;
};

TransferCache& transfer_cache() {
  static TransferCache* cache = new TransferCache();  // never destroyed, like the plan cache
  return *cache;
}

}  // namespace

const TransferPlan& plan_transfers(const MeshShape& src_mesh, const ShardingSpec& src, const MeshShape& dst_mesh,
                                   const ShardingSpec& dst, const Shape& global) {
  TransferKey key{src_mesh, src, dst_mesh, dst, global};
  TransferCache& cache = transfer_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    const auto it = cache.plans.find(key);
    if (it != cache.plans.end()) return *it->second;
  }
  // Planned outside the lock; errors are not cached. A plan another thread inserted meanwhile wins.
  auto plan = std::make_unique<TransferPlan>(plan_transfers_uncached(src_mesh, src, dst_mesh, dst, global));
  std::lock_guard<std::mutex> lock(cache.mu);
  return *cache.plans.try_emplace(std::move(key), std::move(plan)).first->second;
}

}  // namespace dt
