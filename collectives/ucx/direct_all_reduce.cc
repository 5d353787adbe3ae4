// Direct all-reduce, for large calls of groups whose members all live on this host (and may copy each other's
// memory: direct_copies_allowed() in views.h).
//
// Note [Direct all-reduce]
// The ring moves every block through UCX messages: the reduce-scatter reads a peer's chunk into a slot, combines
// it into the output, and the all-gather has every peer copy the finished chunk out of that output again, from
// memory. Here each rank owns block r (algorithms::Blocks) and, chunk by chunk: reads the peers' chunks of it
// straight out of their inputs into a cache-sized slot (process_vm_readv), combines them in rank order, then copies
// the finished chunk, still in cache, into its own output (with streaming stores when the call is large: Note
// [Streaming copies] in kernels/cpu/stream_copy.h) and into every peer's output (process_vm_writev). The ranks
// exchange their buffers' addresses first (slot 0) and a "done" at the end (slot 1); a call completes once every
// peer is done, so no input is read and no output written after the call returned anywhere. Unlike the ring's
// all-gather half, nobody reads a finished chunk back from memory: it leaves the cache once, into every output,
// which makes large calls faster than the ring (the threshold: direct_allreduce_min_bytes in algorithm_table.h).
//
// In place (send == recv) is safe: rank q's buffer region of block b is read and then written only by b's owner,
// chunk by chunk in that order, and nobody else touches it during the call.
#include <algorithm>
#include <cstring>

#include "collectives/algorithms/ring.h"
#include "collectives/ucx/algorithms.h"
#include "collectives/ucx/views.h"
#include "collectives/ucx/worker.h"
#include "core/error.h"
#include "kernels/copy.h"
#include "kernels/reduce.h"

namespace dt::ucx {

namespace {

constexpr uint32_t kAddressSlot = 0, kDoneSlot = 1;

// What a rank tells its peers: its buffers, and its call (checked: every member must have made the same call).
struct Buffers {
  uint64_t in = 0, out = 0;
  int64_t count = 0;
  int32_t dtype = 0, op = 0;
};

}  // namespace

void build_direct_all_reduce(UcxOp& op, int64_t chunk_bytes) {
  const CollectiveArgs& a = op.args();
  const int n = op.size(), r = op.rank();
  const size_t es = op.elem_size();
  auto* mine = static_cast<Buffers*>(op.scratch(sizeof(Buffers)));
  *mine = Buffers{uint64_t(reinterpret_cast<uintptr_t>(a.send)), uint64_t(reinterpret_cast<uintptr_t>(a.recv)), a.count,
                  int32_t(a.dtype), int32_t(a.op)};
  auto* theirs = static_cast<Buffers*>(op.scratch(int64_t(sizeof(Buffers)) * n));
  const algorithms::Blocks blocks(a.count, n);
  const int64_t piece = std::max<int64_t>(1, std::min<int64_t>(blocks.block, chunk_bytes / int64_t(es)));
  char* slots = static_cast<char*>(op.scratch(2 * piece * int64_t(es)));

  std::vector<int> got;
  for (int s = 1; s < n; ++s) {
    const int j = (r - s + n) % n;
    got.push_back(op.recv(j, kAddressSlot, &theirs[j], sizeof(Buffers)));
    op.recv(j, kDoneSlot, nullptr, 0);
  }
  for (int s = 1; s < n; ++s) op.send((r + s) % n, kAddressSlot, mine, sizeof(Buffers));

  UcxOp* self = &op;  // the task runs inside this op's advance()
  const int work = op.run([self, mine, theirs, slots, piece, blocks, n, r, es] {
    const UcxWorker& w = self->worker();
    const CommState& comm = *self->comm();
    const CollectiveArgs& args = self->args();
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      const Buffers& b = theirs[q];
      DT_CHECK_ARG(b.count == mine->count && b.dtype == mine->dtype && b.op == mine->op, w.peer_name(comm, q),
                   " called all_reduce(count=", b.count, ", ", dtype_name(DType(b.dtype)), ", ",
                   reduce_op_name(ReduceOp(b.op)), ") where this rank called ", args.describe(),
                   " (mismatched collective calls)");
    }
    const char* in = static_cast<const char*>(args.send);
    char* out = static_cast<char*>(args.recv);
    char* acc = slots;
    char* incoming = slots + piece * int64_t(es);
    const int64_t off = blocks.offset(r), len = blocks.size(r);
    // This rank's output is not read again during the call: stream it when the call is large.
    const bool stream = size_t(args.count) * es >= kernels::stream_copy_min_bytes();
    for (int64_t c0 = 0; c0 < len; c0 += piece) {
      const int64_t m = std::min(piece, len - c0);
      const size_t bytes = size_t(m) * es, at = size_t(off + c0) * es;
      // Combine the members' chunks in rank order.
      const char* cur = nullptr;
      for (int q = 0; q < n; ++q) {
        const char* src = in + at;
        if (q != r) {
          char* buf = cur == nullptr ? acc : incoming;
          copy_with_peer(w, comm, q, buf, theirs[q].in + at, bytes, /*write=*/false);
          src = buf;
        }
        if (cur == nullptr) {
          cur = src;
        } else {
          kernels::reduce(acc, cur, src, m, args.dtype, args.op, Device::cpu());
          cur = acc;
        }
      }
      if (args.op == ReduceOp::kAvg) kernels::divide_by(acc, m, args.dtype, n, Device::cpu());
      // The finished chunk, from cache, to every member's output.
      if (stream)
        kernels::stream_copy_bytes(out + at, acc, bytes);
      else
        std::memcpy(out + at, acc, bytes);
      for (int s = 1; s < n; ++s) {
        const int q = (r + s) % n;
        copy_with_peer(w, comm, q, acc, theirs[q].out + at, bytes, /*write=*/true);
      }
    }
    if (stream) kernels::stream_copy_fence();
  });
  for (int g : got) op.after(g, work);
  for (int s = 1; s < n; ++s) op.after(work, op.send((r + s) % n, kDoneSlot, nullptr, 0));
}

}  // namespace dt::ucx
