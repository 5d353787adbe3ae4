#include "collectives/ucx/algorithm_table.h"

#include <cstdlib>
#include <string>

#include "collectives/ucx/algorithms.h"
#include "core/config.h"
#include "core/error.h"

namespace dt::ucx {

namespace {

constexpr uint32_t bit(CollectiveKind k) { return 1u << uint32_t(k); }
constexpr uint32_t kAllCollectives = bit(CollectiveKind::kAllGather) | bit(CollectiveKind::kReduceScatter) |
                                     bit(CollectiveKind::kAllReduce) | bit(CollectiveKind::kBroadcast) |
                                     bit(CollectiveKind::kAllToAll) | bit(CollectiveKind::kAllToAllV) |
                                     bit(CollectiveKind::kBarrier);

bool always(const SelectionInput&, const UcxTuning&) { return true; }

// The table, in priority order: the fixed entries first, then per kind from the smallest messages up.
const AlgorithmDesc kTable[] = {
    {"point_to_point", bit(CollectiveKind::kSend) | bit(CollectiveKind::kRecv), always, nullptr, nullptr, true, false,
     [](UcxOp& op, int64_t, const UcxTuning&) { build_point_to_point(op); }},
    {"views", bit(CollectiveKind::kAllGather) | bit(CollectiveKind::kAllToAllV),
     [](const SelectionInput& in, const UcxTuning&) { return in.views; },
     [](const SelectionInput& in) { return in.views; }, "a call with strided views", true, false,
     [](UcxOp& op, int64_t, const UcxTuning& t) { build_views(op, t.direct_min_bytes); }},
    {"segments", bit(CollectiveKind::kAllGather) | bit(CollectiveKind::kReduceScatter),
     [](const SelectionInput& in, const UcxTuning&) { return in.segments; },
     [](const SelectionInput& in) { return in.segments; }, "a call with segmented blocks", true, false,
     [](UcxOp& op, int64_t, const UcxTuning& t) { build_segments(op, t.direct_min_bytes); }},
    {"local", kAllCollectives, [](const SelectionInput& in, const UcxTuning&) { return in.group_size == 1; },
     [](const SelectionInput& in) { return in.group_size == 1; }, "a group of one", true, false,
     [](UcxOp& op, int64_t, const UcxTuning&) { build_local(op); }},
    {"ring", bit(CollectiveKind::kAllGather), always, nullptr, nullptr, false, true,
     [](UcxOp& op, int64_t chunk, const UcxTuning&) { build_ring_all_gather(op, chunk); }},
    {"ring", bit(CollectiveKind::kReduceScatter), always, nullptr, nullptr, false, true,
     [](UcxOp& op, int64_t chunk, const UcxTuning& t) { build_ring_reduce_scatter(op, chunk, t.reduce_slots); }},
    {"recursive_doubling", bit(CollectiveKind::kAllReduce),
     [](const SelectionInput& in, const UcxTuning& t) { return in.bytes <= t.allreduce_small_bytes; }, nullptr, nullptr,
     false, false, [](UcxOp& op, int64_t, const UcxTuning&) { build_recursive_doubling_all_reduce(op); }},
    // Members on one host: each reduces its block from the peers' memory (Note [Direct all-reduce]).
    {"direct", bit(CollectiveKind::kAllReduce),
     [](const SelectionInput& in, const UcxTuning& t) {
       return t.direct_allreduce_min_bytes >= 0 && in.bytes >= t.direct_allreduce_min_bytes;
     },
     [](const SelectionInput& in) { return in.one_host; },
     "every member on this host with direct copies allowed (process_vm_readv: see DT_UCX_DIRECT and Yama's "
     "ptrace_scope)",
     false, true, [](UcxOp& op, int64_t chunk, const UcxTuning&) { build_direct_all_reduce(op, chunk); }},
    // Ring reduce-scatter + ring all-gather, chunk-level overlap of the two phases.
    {"ring", bit(CollectiveKind::kAllReduce), always, nullptr, nullptr, false, true,
     [](UcxOp& op, int64_t chunk, const UcxTuning& t) { build_ring_all_reduce(op, chunk, t.reduce_slots); }},
    {"binomial", bit(CollectiveKind::kBroadcast),
     [](const SelectionInput& in, const UcxTuning& t) { return in.bytes <= t.broadcast_small_bytes; }, nullptr, nullptr,
     false, false, [](UcxOp& op, int64_t, const UcxTuning&) { build_binomial_broadcast(op); }},
    {"chain", bit(CollectiveKind::kBroadcast), always, nullptr, nullptr, false, true,
     [](UcxOp& op, int64_t chunk, const UcxTuning&) { build_chain_broadcast(op, chunk); }},
    {"pairwise", bit(CollectiveKind::kAllToAll) | bit(CollectiveKind::kAllToAllV), always, nullptr, nullptr, false,
     false, [](UcxOp& op, int64_t, const UcxTuning&) { build_pairwise_all_to_all(op); }},
    {"dissemination", bit(CollectiveKind::kBarrier), always, nullptr, nullptr, false, false,
     [](UcxOp& op, int64_t, const UcxTuning&) { build_dissemination_barrier(op); }},
};

AlgorithmChoice choice(const AlgorithmDesc& d, const UcxTuning& t) { return {&d, d.pipelined ? t.chunk_bytes : 0}; }

std::string names_for(CollectiveKind kind) {
  std::string out;
  for (const AlgorithmDesc& d : kTable)
    if (d.serves(kind)) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

std::span<const AlgorithmDesc> algorithm_table() { return kTable; }

const AlgorithmDesc* find_algorithm(CollectiveKind kind, std::string_view name) {
  for (const AlgorithmDesc& d : kTable)
    if (d.serves(kind) && name == d.name) return &d;
  return nullptr;
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
  d.force_algorithms(config::get_string(Var::kUcxAlgorithm));
  return d;
}

void UcxTuning::force_algorithms(std::string_view spec) {
  std::array<const AlgorithmDesc*, kNumCollectiveKinds> out{};
  while (!trim(spec).empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    DT_CHECK_ARG(colon != std::string_view::npos, "UCX algorithm choice '", item,
                 "': expected kind:algorithm, e.g. all_reduce:direct");
    const std::string_view kind_name = trim(item.substr(0, colon)), name = trim(item.substr(colon + 1));
    size_t k = 0;
    std::string kinds;
    for (; k < kNumCollectiveKinds; ++k) {
      if (kind_name == collective_kind_name(CollectiveKind(k))) break;
      kinds += (kinds.empty() ? "" : ", ") + std::string(collective_kind_name(CollectiveKind(k)));
    }
    DT_CHECK_ARG(k < kNumCollectiveKinds, "UCX algorithm choice '", item, "': no collective kind '", kind_name,
                 "'; expected one of ", kinds);
    const CollectiveKind kind = CollectiveKind(k);
    const AlgorithmDesc* d = find_algorithm(kind, name);
    DT_CHECK_ARG(d != nullptr, "UCX algorithm choice '", item, "': no algorithm '", name, "' for ", kind_name,
                 "; expected one of ", names_for(kind));
    out[k] = d;
  }
  forced = out;
}

AlgorithmChoice select_algorithm(const SelectionInput& in, const UcxTuning& t) {
  for (const AlgorithmDesc& d : kTable)
    if (d.fixed && d.serves(in.kind) && d.admits(in, t)) return choice(d, t);
  DT_ASSERT(!in.views && !in.segments, "no UCX algorithm takes strided views or segments for ",
            collective_kind_name(in.kind));
  if (const AlgorithmDesc* f = t.forced[size_t(in.kind)]) {
    if (f->can_run != nullptr && !f->can_run(in))
      DT_THROW(Unsupported, "the UCX algorithm '", f->name, "' forced for ", collective_kind_name(in.kind),
               " cannot run this call: it needs ", f->needs, "; force another one (", names_for(in.kind), ") or none");
    return choice(*f, t);
  }
  for (const AlgorithmDesc& d : kTable)
    if (!d.fixed && d.serves(in.kind) && (d.can_run == nullptr || d.can_run(in)) && d.admits(in, t))
      return choice(d, t);
  DT_ASSERT(false, "no UCX algorithm for ", collective_kind_name(in.kind));
  return {};
}

}  // namespace dt::ucx
