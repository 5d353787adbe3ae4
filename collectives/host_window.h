// HostWindow: memory that the ranks of one host map from each other, so that pieces of several ranks' memory read as
// one contiguous range without a copy (FSDP's gathered parameters: Note [Gathering by mapping] in
// fsdp/mapped_path.cc).
//
// Note [Shared host memory]
// Each rank's window is a memfd mapped into its own address space. A rank opens a peer's memfd through
// /proc/<pid>/fd/<fd> (the permission process_vm_readv needs too, which UCX's direct copies already use) and maps
// pages of it, MAP_SHARED and MAP_FIXED, into an address range it reserved: a range is any sequence of page-aligned
// pieces of the ranks' windows. Every range is mapped when the window is made, all at once, and every file
// descriptor is closed again, so a window costs no descriptor and no mmap call after its creation. A peer's memfd is
// recognised by its name, which carries a random tag the peer published: a rank on another host (or in another pid
// namespace) that happens to share the pid and descriptor number is never opened. When any rank cannot map every
// other's window (several hosts, /proc not readable, the feature turned off on a rank) every rank gets null and
// keeps its copying path: the decision is collective, so no rank takes a path another does not.
//
// The pages stay the owner's: a write by rank r to its window is seen at once through every range that maps it.
// Ordering those writes against the readers is the caller's business (FSDP's token, in the Note above).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/communicator.h"

namespace dt {

class HostWindow {
 public:
  // Bytes [offset, offset + bytes) of `rank`'s window at `at` bytes into a range. offset and at are multiples of
  // page_bytes(); bytes need not be (the last page of the piece is mapped whole).
  struct Piece {
    int rank = 0;
    int64_t offset = 0, bytes = 0, at = 0;
  };
  struct RangeSpec {
    int64_t bytes = 0;  // the range's length; addresses not covered by a piece are not readable
    std::vector<Piece> pieces;
  };

  // Collective over `comm` (a host backend): every rank makes a window of `bytes` (rounded up to pages) and maps
  // `ranges` (the same on every rank). Null on every rank when some rank cannot (Note [Shared host memory]) or passed
  // enable = false. A piece outside its range or its window is an InvalidArgument.
  static std::shared_ptr<HostWindow> create(Communicator& comm, int64_t bytes, const std::vector<RangeSpec>& ranges,
                                            bool enable);
  static int64_t page_bytes();

  ~HostWindow();
  HostWindow(const HostWindow&) = delete;
  HostWindow& operator=(const HostWindow&) = delete;

  uint8_t* local() const { return local_; }  // this rank's window
  int64_t bytes() const { return bytes_; }
  uint8_t* range(size_t k) const { return ranges_.at(k).first; }

  struct Key {};  // create() only
  HostWindow(Key, uint8_t* local, int64_t bytes) : local_(local), bytes_(bytes) {}

 private:
  uint8_t* local_ = nullptr;
  int64_t bytes_ = 0;
  std::vector<std::pair<uint8_t*, int64_t>> ranges_;  // start, reserved length
};

}  // namespace dt
