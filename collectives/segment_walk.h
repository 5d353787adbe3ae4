// The walk that moves a segmented block (Note [Segmented blocks] in collectives/communicator.h) from the sender's
// segments into the receiver's, shared by the backends: UCX (local copies, and the pieces of its direct reads from
// a peer's memory) and the thread backend.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "collectives/communicator.h"

namespace dt {

// Walks recv segments [recv, recv + nr) against send segments [send, send + ns), both sorted and non-overlapping:
// piece(dst, src, bytes) for each overlap, in order; gap(dst, bytes) for each part of a recv segment that no send
// segment covers (a block's bytes outside its send segments read as zeros). A send segment's `data` may be an
// address in another process (UCX's direct reads): the walk only computes with it.
template <typename Piece, typename Gap>
void walk_segments(const Segment* send, int64_t ns, const Segment* recv, int64_t nr, Piece&& piece, Gap&& gap) {
  int64_t i = 0;
  for (int64_t k = 0; k < nr; ++k) {
    const Segment& r = recv[k];
    char* dst = static_cast<char*>(r.data);
    int64_t pos = r.offset;
    const int64_t end = r.offset + r.bytes;
    while (pos < end) {
      while (i < ns && (send[i].bytes == 0 || send[i].offset + send[i].bytes <= pos)) ++i;  // empty ones move nothing
      if (i == ns || send[i].offset >= end) {
        gap(dst + (pos - r.offset), size_t(end - pos));
        break;
      }
      if (send[i].offset > pos) {
        gap(dst + (pos - r.offset), size_t(send[i].offset - pos));
        pos = send[i].offset;
      }
      const int64_t stop = std::min(end, send[i].offset + send[i].bytes);
      piece(dst + (pos - r.offset), static_cast<const char*>(send[i].data) + (pos - send[i].offset),
            size_t(stop - pos));
      pos = stop;
    }
  }
}

// The walk within this process: memcpy the pieces, zero the gaps.
inline void copy_segments(const Segment* send, int64_t ns, const Segment* recv, int64_t nr) {
  walk_segments(
      send, ns, recv, nr, [](char* dst, const char* src, size_t bytes) { std::memcpy(dst, src, bytes); },
      [](char* dst, size_t bytes) { std::memset(dst, 0, bytes); });
}

}  // namespace dt
