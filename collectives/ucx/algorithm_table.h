// Algorithm selection for the UCX backend: one table maps (collective, bytes per rank, group size) to an algorithm
// and its pipelining chunk. Every rank of a group must choose the same algorithm, so the choice depends only on
// arguments all ranks share (never on timing).
#pragma once

#include <cstdint>
#include <string>

#include "collectives/communicator.h"

namespace dt::ucx {

enum class Algorithm : uint8_t {
  kLocal,  // group of one: a local copy
  kRingAllGather,
  kRingReduceScatter,
  kRingAllReduce,      // ring reduce-scatter + ring all-gather, chunk-level overlap of the two phases
  kDirectAllReduce,    // members on one host: each reduces its block from the peers' memory and writes it to theirs
  kRecursiveDoubling,  // all-reduce, small messages
  kBinomialBroadcast,  // small messages
  kChainBroadcast,     // pipelined chain, large messages
  kPairwiseAllToAll,   // all_to_all and all_to_allv
  kDissemination,      // barrier
  kPointToPoint,       // send / recv
  kViews,              // all_gather / all_to_all of strided views (views.cc): direct reads or packed messages
};
const char* algorithm_name(Algorithm a);

// Thresholds and chunk sizes. Defaults were measured on 2-core shared-memory machines (bench/collectives); each can
// be overridden by an environment variable (read once) or per communicator (UcxCommunicator::set_tuning).
// A communicator's thresholds; from_env() gives the configured ones (defaults and help in core/config.h).
struct UcxTuning {
  int64_t allreduce_small_bytes = 0;  // DT_UCX_ALLREDUCE_SMALL_BYTES: recursive doubling up to this
  int64_t broadcast_small_bytes = 0;  // DT_UCX_BROADCAST_SMALL_BYTES: binomial tree up to this
  int64_t chunk_bytes = 0;            // DT_UCX_CHUNK_BYTES: pipelining chunk of the rings and the chain
  int reduce_slots = 0;               // DT_UCX_REDUCE_SLOTS: chunk buffers for the last reduce step
  // DT_UCX_DIRECT_MIN_BYTES: strided views of at least this many bytes between processes of one host are read
  // straight from the peer's memory (process_vm_readv); smaller ones are packed into messages. -1: never read.
  // Measured (bench/redistribute, 2 ranks, S(0)->S(1)): 16 KiB blocks 8.6 us direct vs 11.7 packed (the peer's
  // read of a freshly packed buffer pulls every line out of this core's cache); 8 KiB blocks 7.8 vs 7.2.
  int64_t direct_min_bytes = 0;
  // DT_UCX_DIRECT_ALLREDUCE_MIN_BYTES: all-reduces of at least this many bytes on groups whose members all live on
  // this host use the direct algorithm (direct_all_reduce.cc). -1: never.
  int64_t direct_allreduce_min_bytes = 0;

  static UcxTuning from_env();  // the configured values (core/config.h)
};

struct AlgorithmChoice {
  Algorithm algorithm = Algorithm::kLocal;
  int64_t chunk_bytes = 0;  // 0: no pipelining
};

// The table (calls with strided views always take kViews). `bytes` is the per-rank input size (count * element size;
// all_to_allv: this rank's total); `one_host`: every member lives on this host and direct copies are allowed.
AlgorithmChoice select_algorithm(CollectiveKind kind, int64_t bytes, int group_size, bool one_host,
                                 const UcxTuning& tuning);

}  // namespace dt::ucx
