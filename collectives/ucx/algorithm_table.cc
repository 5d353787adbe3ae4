#include "collectives/ucx/algorithm_table.h"

#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace dt::ucx {

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kLocal:
      return "local";
    case Algorithm::kRingAllGather:
      return "ring_all_gather";
    case Algorithm::kRingReduceScatter:
      return "ring_reduce_scatter";
    case Algorithm::kRingAllReduce:
      return "ring_all_reduce";
    case Algorithm::kDirectAllReduce:
      return "direct_all_reduce";
    case Algorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case Algorithm::kBinomialBroadcast:
      return "binomial_broadcast";
    case Algorithm::kChainBroadcast:
      return "chain_broadcast";
    case Algorithm::kPairwiseAllToAll:
      return "pairwise_all_to_all";
    case Algorithm::kDissemination:
      return "dissemination_barrier";
    case Algorithm::kPointToPoint:
      return "point_to_point";
    case Algorithm::kViews:
      return "strided_views";
  }
  return "?";
}

namespace {
int64_t env_int(const char* name, int64_t fallback, int64_t min_value) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  char* end = nullptr;
  long long v = std::strtoll(e, &end, 10);
  DT_CHECK_ARG(end != e && *end == '\0' && v >= min_value, name, " must be an integer >= ", min_value, ", got '", e,
               "'");
  return v;
}
}  // namespace

UcxTuning UcxTuning::from_env() {
  static const UcxTuning t = [] {
    UcxTuning d;
    d.allreduce_small_bytes = env_int("DT_UCX_ALLREDUCE_SMALL_BYTES", d.allreduce_small_bytes, -1);
    d.broadcast_small_bytes = env_int("DT_UCX_BROADCAST_SMALL_BYTES", d.broadcast_small_bytes, -1);
    d.chunk_bytes = env_int("DT_UCX_CHUNK_BYTES", d.chunk_bytes, 1);
    d.reduce_slots = int(env_int("DT_UCX_REDUCE_SLOTS", d.reduce_slots, 1));
    d.direct_min_bytes = env_int("DT_UCX_DIRECT_MIN_BYTES", d.direct_min_bytes, -1);
    d.direct_allreduce_min_bytes = env_int("DT_UCX_DIRECT_ALLREDUCE_MIN_BYTES", d.direct_allreduce_min_bytes, -1);
    return d;
  }();
  return t;
}

namespace {
constexpr int64_t kAny = std::numeric_limits<int64_t>::max();

struct Rule {
  CollectiveKind kind;
  int64_t max_bytes;  // the rule applies when bytes <= max_bytes (tuning-dependent limits are resolved below)
  Algorithm algorithm;
  bool pipelined;
  int64_t min_bytes = 0;  // ... and bytes >= min_bytes (a negative minimum disables the rule)
  bool one_host = false;  // ... and every member lives on this host
};
}  // namespace

AlgorithmChoice select_algorithm(CollectiveKind kind, int64_t bytes, int group_size, bool one_host,
                                 const UcxTuning& t) {
  if (kind == CollectiveKind::kSend || kind == CollectiveKind::kRecv) return {Algorithm::kPointToPoint, 0};
  if (group_size == 1) return {Algorithm::kLocal, 0};
  // The table, in priority order: the first rule of the kind whose size limit admits `bytes` wins.
  const Rule rules[] = {
      {CollectiveKind::kAllGather, kAny, Algorithm::kRingAllGather, true},
      {CollectiveKind::kReduceScatter, kAny, Algorithm::kRingReduceScatter, true},
      {CollectiveKind::kAllReduce, t.allreduce_small_bytes, Algorithm::kRecursiveDoubling, false},
      {CollectiveKind::kAllReduce, kAny, Algorithm::kDirectAllReduce, true, t.direct_allreduce_min_bytes, true},
      {CollectiveKind::kAllReduce, kAny, Algorithm::kRingAllReduce, true},
      {CollectiveKind::kBroadcast, t.broadcast_small_bytes, Algorithm::kBinomialBroadcast, false},
      {CollectiveKind::kBroadcast, kAny, Algorithm::kChainBroadcast, true},
      {CollectiveKind::kAllToAll, kAny, Algorithm::kPairwiseAllToAll, false},
      {CollectiveKind::kAllToAllV, kAny, Algorithm::kPairwiseAllToAll, false},
      {CollectiveKind::kBarrier, kAny, Algorithm::kDissemination, false},
  };
  for (const Rule& r : rules)
    if (r.kind == kind && bytes <= r.max_bytes && r.min_bytes >= 0 && bytes >= r.min_bytes && (!r.one_host || one_host))
      return {r.algorithm, r.pipelined ? t.chunk_bytes : 0};
  DT_ASSERT(false, "no UCX algorithm for ", collective_kind_name(kind));
  return {};
}

}  // namespace dt::ucx
