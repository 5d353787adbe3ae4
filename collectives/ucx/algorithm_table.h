// Algorithm selection for the UCX backend: one table of descriptors (name, the kinds it serves, when it is chosen,
// what it needs to run at all, its builder). Selection walks the table in order: the first descriptor serving the
// call's kind whose rule admits the call wins. Every rank of a group must choose the same algorithm, so the choice
// depends only on arguments all ranks share (never on timing).
//
// An algorithm can be forced per collective kind by name, e.g. DT_UCX_ALGORITHM="all_reduce:direct,all_gather:ring"
// (read once) or UcxCommunicator::set_algorithms (tests); the name of the algorithm that ran is on the Work
// (Work::algorithm()). Forcing overrides the size rules, never what an algorithm needs: calls with strided views
// always take "views", groups of one "local", send/recv "point_to_point"; forcing an algorithm that cannot run the
// call (direct between hosts) is a dt::Unsupported error of the call.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "collectives/communicator.h"
#include "core/config.h"

namespace dt::ucx {

class UcxOp;
struct UcxTuning;

inline constexpr size_t kNumCollectiveKinds = size_t(CollectiveKind::kBarrier) + 1;

// What the choice depends on: what every rank of the group shares.
struct SelectionInput {
  CollectiveKind kind = CollectiveKind::kBarrier;
  int64_t bytes = 0;  // per-rank input size (count * element size; all_to_allv: this rank's total)
  int group_size = 1;
  bool one_host = false;  // every member lives on this host and direct copies are allowed
  bool views = false;     // strided views instead of buffers
  bool segments = false;  // segmented blocks instead of buffers
};

struct AlgorithmDesc {
  const char* name;  // unique among the algorithms of each kind it serves; recorded on the Work
  uint32_t kinds;    // bit (1 << kind) for each CollectiveKind it serves
  // Chosen (in table order) when this admits the call; nullptr: only when forced.
  bool (*admits)(const SelectionInput& in, const UcxTuning& t);
  // Whether it can run the call at all (checked for forced choices too); nullptr: always. `needs` says what it
  // needs, for the error when a forced choice cannot run.
  bool (*can_run)(const SelectionInput& in);
  const char* needs;
  // Chosen whenever it admits the call, before any forced choice: what a call's shape dictates (views, a group of
  // one, point to point).
  bool fixed;
  bool pipelined;  // uses the tuning's chunk size
  void (*build)(UcxOp& op, int64_t chunk_bytes, const UcxTuning& t);

  bool serves(CollectiveKind kind) const { return (kinds >> uint32_t(kind)) & 1u; }
};

// The table, in priority order.
std::span<const AlgorithmDesc> algorithm_table();
// The algorithm of that name serving `kind`, or nullptr.
const AlgorithmDesc* find_algorithm(CollectiveKind kind, std::string_view name);

// Thresholds and chunk sizes. Defaults were measured on 2-core shared-memory machines (bench/collectives); each can
// be overridden by an environment variable (read once) or per communicator (UcxCommunicator::set_tuning).
// A communicator's thresholds: a default-constructed one holds the declared defaults, from_env() the configured
// values (names, defaults and help of the DT_UCX_* variables in core/config.h).
struct UcxTuning {
  // recursive doubling up to this, a ring above
  int64_t allreduce_small_bytes = config::default_int(config::Var::kUcxAllreduceSmallBytes);
  // binomial tree up to this, a pipelined chain above
  int64_t broadcast_small_bytes = config::default_int(config::Var::kUcxBroadcastSmallBytes);
  // pipelining chunk of the rings and the chain
  int64_t chunk_bytes = config::default_int(config::Var::kUcxChunkBytes);
  // chunk buffers for the last reduce step
  int reduce_slots = int(config::default_int(config::Var::kUcxReduceSlots));
  // Strided views of at least this many bytes between processes of one host are read straight from the peer's
  // memory (process_vm_readv); smaller ones are packed into messages (the peer's read of a freshly packed buffer
  // pulls every line out of this core's cache, which costs more than a direct read from 16 KiB). -1: never.
  int64_t direct_min_bytes = config::default_int(config::Var::kUcxDirectMinBytes);
  // All-reduces of at least this many bytes on groups whose members all live on this host use the direct algorithm
  // (direct_all_reduce.cc). -1: never.
  int64_t direct_allreduce_min_bytes = config::default_int(config::Var::kUcxDirectAllreduceMinBytes);
  // DT_UCX_ALGORITHM: per kind, the algorithm forced by name (nullptr: chosen by the rules). See force_algorithms.
  std::array<const AlgorithmDesc*, kNumCollectiveKinds> forced{};

  static UcxTuning from_env();  // the configured values (core/config.h)

  // Parses "kind:name[,kind:name...]" (kinds as collective_kind_name prints them: all_reduce, all_gather, ...) and
  // forces those algorithms; an empty string clears every forced choice. Throws dt::InvalidArgument naming the valid
  // kinds or the valid algorithms of the kind.
  void force_algorithms(std::string_view spec);
};

struct AlgorithmChoice {
  const AlgorithmDesc* algorithm = nullptr;
  int64_t chunk_bytes = 0;  // 0: no pipelining
};

// The choice for one call. Throws dt::Unsupported when the forced algorithm of the kind cannot run the call.
AlgorithmChoice select_algorithm(const SelectionInput& in, const UcxTuning& tuning);
// The same for a call with buffers (no views).
inline AlgorithmChoice select_algorithm(CollectiveKind kind, int64_t bytes, int group_size, bool one_host,
                                        const UcxTuning& tuning) {
  return select_algorithm(SelectionInput{kind, bytes, group_size, one_host, false}, tuning);
}

}  // namespace dt::ucx
