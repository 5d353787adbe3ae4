// UCX tag layout. UCX matches a receive by (tag & mask) only, not by sender, so the tag carries everything that
// tells two messages apart:
//
//   63..60 kind   the collective (or point-to-point, or the abort channel): different kinds never match, so ranks
//                 that called different collectives time out naming the call instead of exchanging garbage
//   59..46 comm   the communicator id (world = 0; split() takes fresh ids from the store), so sub-groups sharing
//                 the worker never cross-match
//   45..32 seq    the call's sequence number in its communicator (per peer and direction for send/recv)
//   31..16 src    the sender's rank in the communicator
//   15..0  slot   which message of the call (step and chunk); wraps harmlessly because UCX delivers the messages of
//                 one sender in order and a call never has 65536 messages in flight between two ranks
#pragma once

#include <cstdint>

#include "collectives/communicator.h"

namespace dt::ucx {

inline constexpr int kSeqBits = 14;
inline constexpr int kCommBits = 14;
inline constexpr uint32_t kSeqMask = (1u << kSeqBits) - 1;
inline constexpr uint32_t kCommMask = (1u << kCommBits) - 1;
inline constexpr uint32_t kMaxGroupSize = 1u << 16;
inline constexpr uint32_t kSlotCount = 1u << 16;

// Kinds 0..8 are CollectiveKind (send and recv share kSend, being two ends of one message); 15 is the abort channel.
inline constexpr uint32_t kAbortKind = 15;

inline uint32_t tag_kind(CollectiveKind kind) {
  return kind == CollectiveKind::kRecv ? uint32_t(CollectiveKind::kSend) : uint32_t(kind);
}

inline uint64_t make_tag(uint32_t kind, uint32_t comm, uint32_t seq, uint32_t src, uint32_t slot) {
  return (uint64_t(kind & 0xF) << 60) | (uint64_t(comm & kCommMask) << 46) | (uint64_t(seq & kSeqMask) << 32) |
         (uint64_t(src & 0xFFFF) << 16) | uint64_t(slot & 0xFFFF);
}
inline constexpr uint64_t kFullMask = ~uint64_t(0);
inline constexpr uint64_t kKindMask = uint64_t(0xF) << 60;

inline uint32_t tag_src(uint64_t tag) { return uint32_t((tag >> 16) & 0xFFFF); }
inline uint32_t tag_slot(uint64_t tag) { return uint32_t(tag & 0xFFFF); }

}  // namespace dt::ucx
