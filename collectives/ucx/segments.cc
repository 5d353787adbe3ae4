// all_gather of segmented blocks on UCX (Note [Segmented blocks] in collectives/communicator.h).
//
// Note [Direct segment reads]
// Between two processes of one host (blocks of at least direct_min_bytes, direct copies allowed: views.h), each
// rank sends every peer its block's size and send segments (offset, bytes, address; slot 0), then reads each
// peer's block out of the peer's segments straight into its own recv segments for that peer: a piece is the overlap
// of a recv segment with a send segment, and up to IOV_MAX pieces go in one process_vm_readv; the parts of a recv
// segment that no send segment covers are zeroed. After its reads a rank sends the peer "done" (slot 1) and
// completes only once every peer's "done" came, so no send segment changes while a peer reads it. Otherwise
// (another host, small blocks) the sender packs its block into scratch, gaps zeroed, and sends it as one message
// (slot 2), which the receiver scatters into its recv segments. This rank's own block goes from its send segments
// to its recv segments by the same walk, with memcpy, while the messages travel.
#include <sys/uio.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "collectives/segment_walk.h"
#include "collectives/ucx/algorithms.h"
#include "collectives/ucx/views.h"
#include "collectives/ucx/worker.h"
#include "core/error.h"

namespace dt::ucx {

namespace {

constexpr uint32_t kListSlot = 0, kDoneSlot = 1, kDataSlot = 2;
constexpr int kMaxPieces = IOV_MAX;

// A segment as it travels: offset and bytes in the block, address in its owner's memory. The first entry of a list
// on the wire is a header: {block bytes, number of segments, 0}.
struct WireSegment {
  int64_t offset = 0, bytes = 0;
  uint64_t addr = 0;
};
static_assert(sizeof(WireSegment) == sizeof(Segment) && sizeof(void*) == sizeof(uint64_t),
              "a Segment travels as it lies in memory");

WireSegment to_wire(const Segment& s) { return {s.offset, s.bytes, uint64_t(reinterpret_cast<uintptr_t>(s.data))}; }
Segment from_wire(const WireSegment& w) { return {w.offset, w.bytes, reinterpret_cast<void*>(uintptr_t(w.addr))}; }

// Note [Direct segment reads]: peer `j`'s block, described by `theirs` (header first), into `recv`.
void read_from_peer(const UcxOp& op, int j, const WireSegment* theirs, int64_t ns, const Segment* recv, int64_t nr) {
  const UcxWorker& w = op.worker();
  const CommState& comm = *op.comm();
  const int64_t block = op.args().count;
  DT_CHECK_ARG(theirs[0].offset == block && theirs[0].bytes == ns, w.peer_name(comm, j),
               " gathers a segmented block of ", theirs[0].offset, " bytes in ", theirs[0].bytes,
               " segments where this rank's is ", block, " bytes in ", ns, " (mismatched collective calls)");
  std::vector<Segment> send;
  for (int64_t k = 1; k <= ns; ++k) {
    send.push_back(from_wire(theirs[k]));
    const Segment& s = send.back();
    DT_CHECK_ARG(s.offset >= 0 && s.bytes >= 0 && s.offset <= block && s.bytes <= block - s.offset &&
                     (k == 1 || s.offset >= send[size_t(k) - 2].offset + send[size_t(k) - 2].bytes),
                 "malformed segment list from ", w.peer_name(comm, j));
  }
  iovec local[kMaxPieces], remote[kMaxPieces];
  int n = 0;
  size_t bytes = 0;
  auto flush = [&] {
    if (n > 0) move_iovecs(w, comm, j, local, n, remote, n, bytes, /*write=*/false);
    n = 0;
    bytes = 0;
  };
  walk_segments(
      send.data(), ns, recv, nr,
      [&](char* dst, const char* src, size_t m) {
        if (n == kMaxPieces) flush();
        local[n] = {dst, m};
        remote[n] = {const_cast<char*>(src), m};  // the peer's address
        ++n;
        bytes += m;
      },
      [](char* dst, size_t m) { std::memset(dst, 0, m); });
  flush();
}

}  // namespace

void build_segments(UcxOp& op, int64_t direct_min_bytes) {
  const CollectiveArgs& a = op.args();
  const int n = op.size(), r = op.rank();
  const UcxWorker& w = op.worker();
  const int64_t block = a.count;
  const bool direct_size = direct_min_bytes >= 0 && block >= direct_min_bytes && direct_copies_allowed();
  auto direct = [&](int peer) { return direct_size && w.peer_info(op.comm()->members[size_t(peer)]).same_host; };

  // The op's copies of the lists (the call's vectors go when building ends): this rank's send list with its header,
  // then every recv list.
  const std::vector<Segment>& send = a.send_segments[0];
  const int64_t ns = int64_t(send.size());
  auto* mine = static_cast<WireSegment*>(op.scratch(int64_t(sizeof(WireSegment)) * (ns + 1)));
  mine[0] = {block, ns, 0};
  auto* my_send = static_cast<Segment*>(op.scratch(int64_t(sizeof(Segment)) * std::max<int64_t>(1, ns)));
  for (int64_t k = 0; k < ns; ++k) {
    mine[k + 1] = to_wire(send[size_t(k)]);
    my_send[k] = send[size_t(k)];
  }
  auto copy_list = [&](int j) {
    const std::vector<Segment>& list = a.recv_segments[size_t(j)];
    auto* out =
        static_cast<Segment*>(op.scratch(int64_t(sizeof(Segment)) * std::max<int64_t>(1, int64_t(list.size()))));
    std::copy(list.begin(), list.end(), out);
    return std::pair<const Segment*, int64_t>(out, int64_t(list.size()));
  };
  UcxOp* self = &op;  // tasks run inside this op's advance()

  char* packed = nullptr;  // this rank's block, packed once for every peer it is not direct with
  int pack = -1;
  for (int s = 1; s < n; ++s) {
    const int j = (r - s + n) % n;
    const auto [recv, nr] = copy_list(j);
    if (direct(j)) {
      auto* theirs = static_cast<WireSegment*>(op.scratch(int64_t(sizeof(WireSegment)) * (ns + 1)));
      const int got = op.recv(j, kListSlot, theirs, int64_t(sizeof(WireSegment)) * (ns + 1));
      op.recv(j, kDoneSlot, nullptr, 0);
      op.send(j, kListSlot, mine, int64_t(sizeof(WireSegment)) * (ns + 1));
      const int read = op.run([self, j, theirs, ns, recv, nr] { read_from_peer(*self, j, theirs, ns, recv, nr); });
      op.after(got, read);
      op.after(read, op.send(j, kDoneSlot, nullptr, 0));
      continue;
    }
    char* buf = static_cast<char*>(op.scratch(std::max<int64_t>(1, block)));
    const int got = op.recv(j, kDataSlot, block ? buf : nullptr, block);
    op.after(got, op.run([buf, block, recv, nr] {
      const Segment whole{0, block, buf};
      copy_segments(&whole, 1, recv, nr);
    }));
    if (packed == nullptr) {
      packed = static_cast<char*>(op.scratch(std::max<int64_t>(1, block)));
      pack = op.run([packed, block, my_send, ns] {
        const Segment whole{0, block, packed};
        copy_segments(my_send, ns, &whole, 1);
      });
    }
    op.after(pack, op.send(j, kDataSlot, block ? packed : nullptr, block));
  }
  const auto [own, nown] = copy_list(r);
  if (nown > 0) op.defer(op.run([my_send, ns, own, nown] { copy_segments(my_send, ns, own, nown); }));
}

}  // namespace dt::ucx
