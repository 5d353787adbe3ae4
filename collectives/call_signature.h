// CallSignature: what the ranks of a group must agree on for one call (the call contract). One value type serves
// every check: the thread backend's rendezvous compares it across ranks, the UCX tag carries its 4-bit digest
// (Note [Mismatched calls] in collectives/ucx/tag.h), the debug wrapper (collectives/debug_communicator.h) exchanges
// it before every call, and the flight recorder (collectives/flight_recorder.h) keeps it for error messages.
//
// Fields that need not agree are normalized away, so that == is the rule: the count where it differs per rank by
// design (all_to_allv, strided views) is 0, the reduce op only counts for reductions, the root only for broadcast,
// a barrier has no dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace dt {

struct CallSignature {
  CollectiveKind kind = CollectiveKind::kBarrier;
  bool split = false;     // Communicator::split (then nothing else counts)
  bool views = false;     // the strided-views form of all_gather / all_to_all
  bool segments = false;  // the segmented-blocks form of all_gather (count: the block's bytes, which must agree)
  int64_t count = 0;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;

  static CallSignature of(const CollectiveArgs& args);
  static CallSignature of_split();

  // "all_reduce(count=4, f32, sum)", "broadcast(count=4, f32, root=1)", "barrier()", "split()".
  std::string describe() const;
  // A 4-bit digest of the fields beyond kind and count (dtype; segments; reduce op; root): what the UCX tag carries.
  uint32_t digest() const;
  bool operator==(const CallSignature&) const = default;

  // As integers, for exchanging across ranks (all_gather_ints); from_ints reads what to_ints wrote.
  static constexpr int kInts = 7;
  void to_ints(int64_t* out) const;
  static CallSignature from_ints(const int64_t* in);
};

}  // namespace dt
