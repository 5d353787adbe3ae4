// UCX tag layout. UCX matches a receive by (tag & mask) only, not by sender, so the tag carries everything that
// tells two messages apart:
//
//   63..60 kind   the collective (or point-to-point, or the abort channel): different kinds never match
//   59..46 comm   the communicator id (world = 0; split() takes fresh ids from the store), so sub-groups sharing
//                 the worker never cross-match
//   45..34 seq    the call's sequence number in its communicator (per peer and direction for send/recv); wraps
//                 harmlessly: UCX delivers one sender's messages in order, and a communicator posts its calls'
//                 receives in call order (only the head of its queue runs)
//   33..30 sig    a 4-bit digest of what else both sides must agree on (CallSignature::digest(): dtype; reduce op;
//                 root), so that calls that differ there almost never match either (an f32 sum and an i32 max do
//                 not; 4 bits leave a few collisions, e.g. among 1-byte dtypes and far-apart broadcast roots)
//   29..16 src    the sender's rank in the communicator (groups of at most 16384)
//   15..0  slot   which message of the call (step and chunk); wraps harmlessly because UCX delivers the messages of
//                 one sender in order and a call never has 65536 messages in flight between two ranks
//
// Note [Mismatched calls]
// Messages of mismatched calls stay in the receiver's unexpected queue. When a call stalls, the worker looks there
// for a message from an awaited peer with the same communicator and sequence number but another kind or digest: that
// peer's call of the same number differs, and the call fails naming it (a debug mode, DT_DEBUG_COLLECTIVES=1,
// compares whole signatures before every call: collectives/debug_communicator.h). Calls that send nothing to this
// rank leave no such evidence; their deadline names them.
#pragma once

#include <cstdint>

#include "collectives/call_signature.h"
#include "collectives/communicator.h"

namespace dt::ucx {

inline constexpr int kSeqBits = 12;
inline constexpr int kCommBits = 14;
inline constexpr uint32_t kSeqMask = (1u << kSeqBits) - 1;
inline constexpr uint32_t kCommMask = (1u << kCommBits) - 1;
inline constexpr uint32_t kSigMask = 0xF;
inline constexpr uint32_t kMaxGroupSize = 1u << 14;
inline constexpr uint32_t kSlotCount = 1u << 16;

// Kinds 0..8 are CollectiveKind (send and recv share kSend, being two ends of one message); 15 is the abort channel.
inline constexpr uint32_t kAbortKind = 15;

inline uint32_t tag_kind(CollectiveKind kind) {
  return kind == CollectiveKind::kRecv ? uint32_t(CollectiveKind::kSend) : uint32_t(kind);
}

// The digest of the call's fields that both sides must agree on beyond kind and counts (see the layout above).
inline uint32_t tag_signature(const CollectiveArgs& a) { return CallSignature::of(a).digest() & kSigMask; }

inline uint64_t make_tag(uint32_t kind, uint32_t comm, uint32_t seq, uint32_t sig, uint32_t src, uint32_t slot) {
  return (uint64_t(kind & 0xF) << 60) | (uint64_t(comm & kCommMask) << 46) | (uint64_t(seq & kSeqMask) << 34) |
         (uint64_t(sig & kSigMask) << 30) | (uint64_t(src & 0x3FFF) << 16) | uint64_t(slot & 0xFFFF);
}
inline constexpr uint64_t kFullMask = ~uint64_t(0);
inline constexpr uint64_t kKindMask = uint64_t(0xF) << 60;
// comm, seq and src: one peer's messages of one call, whatever their kind, digest and slot.
inline constexpr uint64_t kCallMask =
    (uint64_t(kCommMask) << 46) | (uint64_t(kSeqMask) << 34) | (uint64_t(0x3FFF) << 16);

inline uint32_t tag_kind_of(uint64_t tag) { return uint32_t(tag >> 60); }
inline uint32_t tag_seq(uint64_t tag) { return uint32_t((tag >> 34) & kSeqMask); }
inline uint32_t tag_sig(uint64_t tag) { return uint32_t((tag >> 30) & kSigMask); }
inline uint32_t tag_src(uint64_t tag) { return uint32_t((tag >> 16) & 0x3FFF); }
inline uint32_t tag_slot(uint64_t tag) { return uint32_t(tag & 0xFFFF); }

}  // namespace dt::ucx
