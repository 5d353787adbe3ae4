// all_gather and reduce_scatter of segmented blocks on UCX (Note [Segmented blocks] in collectives/communicator.h).
//
// Note [Direct segment reads]
// Between processes of one host (blocks of at least direct_min_bytes, direct copies allowed: views.h), each rank
// sends each peer the block size and its send segments of the block that peer reads (offset, bytes, address;
// slot 0), and reads the peers' blocks out of their segments: a piece is the overlap of a segment of the peer's with
// a range this rank wants, and up to IOV_MAX pieces go in one process_vm_readv; the parts no send segment covers are
// zeroed.
//   all_gather      each peer's block straight into this rank's recv segments for it.
//   reduce_scatter  (every member on this host) this rank's block r, piece by cache-sized piece: each peer's piece
//                   read into a buffer and combined, own rows first (read where they lie) then the peers in rank
//                   order, the last combination written into the output.
// After its reads a rank sends each peer "done" (slot 1) and completes only once every peer's "done" came, so no
// send segment changes while a peer reads it. Otherwise (another host, small blocks) a block travels as one message
// (slot 2) packed from its segments, gaps zeroed, and the receiver scatters it into its recv segments (all_gather)
// or combines the packed blocks into its own (reduce_scatter; the peers in rank order). This rank's own block goes
// by the same walk with memcpy: all_gather defers it while the messages travel.
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
#include "kernels/reduce.h"

namespace dt::ucx {

namespace {

constexpr uint32_t kListSlot = 0, kDoneSlot = 1, kDataSlot = 2;
constexpr int kMaxPieces = IOV_MAX;
constexpr int64_t kPieceBytes = int64_t(256) << 10;  // reduce_scatter's cache-sized pieces

// A segment as it travels: offset and bytes in the block, address in its owner's memory. The first entry of a list
// on the wire is a header: {block bytes, number of segments, 0}.
struct WireSegment {
  int64_t offset = 0, bytes = 0;
  uint64_t addr = 0;
};

// A list copied into the op's scratch (the call's vectors go when building ends).
struct List {
  const Segment* data = nullptr;
  int64_t size = 0;
};

List keep(UcxOp& op, const std::vector<Segment>& list) {
  auto* out = static_cast<Segment*>(op.scratch(int64_t(sizeof(Segment)) * std::max<int64_t>(1, int64_t(list.size()))));
  std::copy(list.begin(), list.end(), out);
  return {out, int64_t(list.size())};
}

// The message telling a peer about `list` (a block of `block` bytes), header first.
WireSegment* wire(UcxOp& op, int64_t block, const std::vector<Segment>& list) {
  const int64_t ns = int64_t(list.size());
  auto* out = static_cast<WireSegment*>(op.scratch(int64_t(sizeof(WireSegment)) * (ns + 1)));
  out[0] = {block, ns, 0};
  for (int64_t k = 0; k < ns; ++k)
    out[k + 1] = {list[size_t(k)].offset, list[size_t(k)].bytes,
                  uint64_t(reinterpret_cast<uintptr_t>(list[size_t(k)].data))};
  return out;
}

int64_t wire_bytes(int64_t ns) { return int64_t(sizeof(WireSegment)) * (ns + 1); }

// Peer j's list (header first), checked against this rank's call: the peer's addresses as Segments.
std::vector<Segment> peer_list(const UcxOp& op, int j, const WireSegment* theirs, int64_t ns, int64_t block) {
  const UcxWorker& w = op.worker();
  const CommState& comm = *op.comm();
  DT_CHECK_ARG(theirs[0].offset == block && theirs[0].bytes == ns, w.peer_name(comm, j), " has a segmented block of ",
               theirs[0].offset, " bytes in ", theirs[0].bytes, " segments where this rank's is ", block, " bytes in ",
               ns, " (mismatched collective calls)");
  std::vector<Segment> out;
  for (int64_t k = 1; k <= ns; ++k) {
    const WireSegment& s = theirs[k];
    DT_CHECK_ARG(s.offset >= 0 && s.bytes >= 0 && s.offset <= block && s.bytes <= block - s.offset &&
                     (out.empty() || s.offset >= out.back().offset + out.back().bytes),
                 "malformed segment list from ", w.peer_name(comm, j));
    out.push_back(Segment{s.offset, s.bytes, reinterpret_cast<void*>(uintptr_t(s.addr))});
  }
  return out;
}

// Note [Direct segment reads]: what `recv` names of peer j's block (its segments `send`, in its memory).
void read_pieces(const UcxOp& op, int j, const std::vector<Segment>& send, const Segment* recv, int64_t nr) {
  const UcxWorker& w = op.worker();
  const CommState& comm = *op.comm();
  iovec local[kMaxPieces], remote[kMaxPieces];
  int n = 0;
  size_t bytes = 0;
  auto flush = [&] {
    if (n > 0) move_iovecs(w, comm, j, local, n, remote, n, bytes, /*write=*/false);
    n = 0;
    bytes = 0;
  };
  walk_segments(
      send.data(), int64_t(send.size()), recv, nr,
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

void build_all_gather(UcxOp& op, int64_t direct_min_bytes) {
  const CollectiveArgs& a = op.args();
  const int n = op.size(), r = op.rank();
  const UcxWorker& w = op.worker();
  const int64_t block = a.count;
  const bool direct_size = direct_min_bytes >= 0 && block >= direct_min_bytes && direct_copies_allowed();
  auto direct = [&](int peer) { return direct_size && w.peer_info(op.comm()->members[size_t(peer)]).same_host; };
  const std::vector<Segment>& send = a.send_segments[0];
  const int64_t ns = int64_t(send.size());
  const List my_send = keep(op, send);
  const WireSegment* mine = wire(op, block, send);
  UcxOp* self = &op;  // tasks run inside this op's advance()

  char* packed = nullptr;  // this rank's block, packed once for every peer it is not direct with
  int pack = -1;
  for (int s = 1; s < n; ++s) {
    const int j = (r - s + n) % n;
    const List recv = keep(op, a.recv_segments[size_t(j)]);
    if (direct(j)) {
      auto* theirs = static_cast<WireSegment*>(op.scratch(wire_bytes(ns)));
      const int got = op.recv(j, kListSlot, theirs, wire_bytes(ns));
      op.recv(j, kDoneSlot, nullptr, 0);
      op.send(j, kListSlot, mine, wire_bytes(ns));
      const int read = op.run([self, j, theirs, ns, block, recv] {
        read_pieces(*self, j, peer_list(*self, j, theirs, ns, block), recv.data, recv.size);
      });
      op.after(got, read);
      op.after(read, op.send(j, kDoneSlot, nullptr, 0));
      continue;
    }
    char* buf = static_cast<char*>(op.scratch(std::max<int64_t>(1, block)));
    const int got = op.recv(j, kDataSlot, block ? buf : nullptr, block);
    op.after(got, op.run([buf, block, recv] {
      const Segment whole{0, block, buf};
      copy_segments(&whole, 1, recv.data, recv.size);
    }));
    if (packed == nullptr) {
      packed = static_cast<char*>(op.scratch(std::max<int64_t>(1, block)));
      pack = op.run([packed, block, my_send] {
        const Segment whole{0, block, packed};
        copy_segments(my_send.data, my_send.size, &whole, 1);
      });
    }
    op.after(pack, op.send(j, kDataSlot, block ? packed : nullptr, block));
  }
  const List own = keep(op, a.recv_segments[size_t(r)]);
  if (own.size > 0) op.defer(op.run([my_send, own] { copy_segments(my_send.data, my_send.size, own.data, own.size); }));
}

void build_reduce_scatter(UcxOp& op, int64_t direct_min_bytes) {
  const CollectiveArgs& a = op.args();
  const int n = op.size(), r = op.rank();
  const int64_t es = int64_t(op.elem_size()), block = a.count * es;
  const bool direct = n > 1 && op.comm()->one_host && direct_min_bytes >= 0 && block >= direct_min_bytes;
  const List own = keep(op, a.send_segments[size_t(r)]);
  UcxOp* self = &op;

  if (direct) {
    // Each peer reads this rank's block of it; this rank reads every peer's block r (the same number of segments).
    auto* theirs = static_cast<WireSegment*>(op.scratch(wire_bytes(own.size) * n));
    std::vector<int> got;
    for (int s = 1; s < n; ++s) {
      const int j = (r - s + n) % n;
      got.push_back(op.recv(j, kListSlot, theirs + (own.size + 1) * j, wire_bytes(own.size)));
      op.recv(j, kDoneSlot, nullptr, 0);
    }
    for (int s = 1; s < n; ++s) {
      const int j = (r + s) % n;
      op.send(j, kListSlot, wire(op, block, a.send_segments[size_t(j)]),
              wire_bytes(int64_t(a.send_segments[size_t(j)].size())));
    }
    const int64_t piece = std::max(es, std::min(block, kPieceBytes / es * es));
    char* acc = static_cast<char*>(op.scratch(3 * piece));  // the running combination, a peer's piece, zeros
    std::memset(acc + 2 * piece, 0, size_t(piece));
    const int work = op.run([self, theirs, own, block, piece, acc, es, n, r] {
      const CollectiveArgs& args = self->args();
      std::vector<std::vector<Segment>> peers(static_cast<size_t>(n));
      for (int q = 0; q < n; ++q)
        if (q != r) peers[size_t(q)] = peer_list(*self, q, theirs + (own.size + 1) * q, own.size, block);
      char* incoming = acc + piece;
      const char* zeros = acc + 2 * piece;
      char* out = static_cast<char*>(args.recv);
      const int last = r == n - 1 ? n - 2 : n - 1;  // the last peer combined: its result goes to the output
      auto combine = [&](char* dst, const char* a, const char* b, size_t bytes) {
        kernels::reduce(dst, a, b, int64_t(bytes) / es, args.dtype, args.op, Device::cpu());
      };
      for (int64_t c0 = 0; c0 < block; c0 += piece) {
        const int64_t m = std::min(piece, block - c0);
        const Segment theirs_piece{c0, m, incoming};
        bool first = true;
        for (int q = 0; q < n; ++q) {
          if (q == r) continue;
          read_pieces(*self, q, peers[size_t(q)], &theirs_piece, 1);
          char* dst = q == last ? out + c0 : acc;
          if (first) {
            // This rank's rows combined with the first peer's straight from where they lie (zeros where it has
            // none): no copy of its own block.
            const Segment span{c0, m, dst};
            walk_segments(
                own.data, own.size, &span, 1,
                [&](char* d, const char* src, size_t len) { combine(d, src, incoming + (d - dst), len); },
                [&](char* d, size_t len) { combine(d, zeros, incoming + (d - dst), len); });
            first = false;
          } else {
            combine(dst, acc, incoming, size_t(m));
          }
        }
        if (args.op == ReduceOp::kAvg) kernels::divide_by(out + c0, m / es, args.dtype, n, Device::cpu());
      }
    });
    for (int g : got) op.after(g, work);
    for (int s = 1; s < n; ++s) op.after(work, op.send((r + s) % n, kDoneSlot, nullptr, 0));
    return;
  }
  // Packed: block j to rank j as one message; this rank's block r from every peer, combined into its own in rank order.
  std::vector<char*> from(static_cast<size_t>(n), nullptr);
  std::vector<int> got;
  for (int s = 1; s < n; ++s) {
    const int j = (r - s + n) % n;
    from[size_t(j)] = static_cast<char*>(op.scratch(std::max<int64_t>(1, block)));
    got.push_back(op.recv(j, kDataSlot, block ? from[size_t(j)] : nullptr, block));
  }
  for (int s = 1; s < n; ++s) {
    const int j = (r + s) % n;
    char* buf = static_cast<char*>(op.scratch(std::max<int64_t>(1, block)));
    const List list = keep(op, a.send_segments[size_t(j)]);
    const int pack = op.run([buf, block, list] {
      const Segment whole{0, block, buf};
      copy_segments(list.data, list.size, &whole, 1);
    });
    op.after(pack, op.send(j, kDataSlot, block ? buf : nullptr, block));
  }
  auto* blocks = static_cast<char**>(op.scratch(int64_t(sizeof(char*)) * n));
  std::copy(from.begin(), from.end(), blocks);
  const int combine = op.run([self, blocks, own, block, es, n, r] {
    const CollectiveArgs& args = self->args();
    char* out = static_cast<char*>(args.recv);
    const Segment whole{0, block, out};
    copy_segments(own.data, own.size, &whole, 1);
    for (int q = 0; q < n; ++q)
      if (q != r) kernels::reduce(out, out, blocks[q], block / es, args.dtype, args.op, Device::cpu());
    if (args.op == ReduceOp::kAvg) kernels::divide_by(out, block / es, args.dtype, n, Device::cpu());
  });
  for (int g : got) op.after(g, combine);
}

}  // namespace

void build_segments(UcxOp& op, int64_t direct_min_bytes) {
  if (op.args().kind == CollectiveKind::kReduceScatter)
    build_reduce_scatter(op, direct_min_bytes);
  else
    build_all_gather(op, direct_min_bytes);
}

}  // namespace dt::ucx
