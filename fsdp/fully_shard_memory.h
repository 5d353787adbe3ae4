// Memory of an FSDP-sharded model on this rank: what the accounting measured (core/memory_stats.h) beside what
// FSDP's design bounds it by.
//
// Note [FSDP memory theory]
// Sharded states stay sharded: parameters, their gradient shards and optimizer state are 1/N of the model's (they
// are read from the accounting's current figures). On top, at any moment of a step:
//   gathered parameters   the root's group (kept from its forward to the end of backward) and at most two other
//                         groups (the running one and the prefetched one), in param_dtype;
//   unsharded gradients   the group whose backward runs, in reduce_dtype (freed into the reduce-scatter input);
//   communication         two all-gather buffers (the waited one and the prefetched one) and two reduce-scatter
//                         inputs (the one in flight and the one being filled), of the largest groups;
//   activations           the measured peak of everything not tagged otherwise.
// The theory is their sum with the largest groups taken for each term, so it bounds the peak from above unless
// something holds memory FSDP does not account for (a leak, a third gathered group): the benchmark prints the
// ratio of the measured peak to it, and a test asserts it stays below 1.1.
#pragma once

#include <cstdint>
#include <string>

#include "core/memory_stats.h"
#include "nn/module.h"

namespace dt::fsdp {

struct MemoryReport {
  MemoryUsage usage;            // measured on the root's device
  int64_t sharded_states = 0;   // parameters + gradient shards + optimizer state, now
  int64_t gathered_params = 0;  // root group + two largest other groups, unsharded
  int64_t unsharded_grads = 0;  // the largest group's gradients, unsharded
  int64_t comm_buffers = 0;     // two all-gather buffers + two reduce-scatter inputs of the largest groups
  int64_t activations = 0;      // measured peak
  int64_t theory() const { return sharded_states + gathered_params + unsharded_grads + comm_buffers + activations; }
  // "peak 41.2 MiB = 0.93x theory (sharded states 12.0 MiB, gathered 8.0 MiB, ...); parameters 6.0 MiB ..."
  std::string to_string() const;
};

// The report of the FSDP groups in `root`'s subtree (after fully_shard). The sharded states are read when called
// (after an optimizer step they include its state); peaks since the last reset_peak_memory.
MemoryReport memory_report(const nn::Module& root);

}  // namespace dt::fsdp
