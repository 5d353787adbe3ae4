#include "collectives/ucx/algorithm_table.h"

#include <cstdlib>
#include <limits>

#include "core/config.h"
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

UcxTuning UcxTuning::from_env() {
  using config::Var;
  UcxTuning d;
  d.allreduce_small_bytes = config::get_int(Var::kUcxAllreduceSmallBytes);
  d.broadcast_small_bytes = config::get_int(Var::kUcxBroadcastSmallBytes);
  d.chunk_bytes = config::get_int(Var::kUcxChunkBytes);
  d.reduce_slots = int(config::get_int(Var::kUcxReduceSlots));
  d.direct_min_bytes = config::get_int(Var::kUcxDirectMinBytes);
  d.direct_allreduce_min_bytes = config::get_int(Var::kUcxDirectAllreduceMinBytes);
  return d;
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
