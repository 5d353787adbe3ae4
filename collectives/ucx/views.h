// Strided views on the UCX backend: the pieces of build_views (views.cc) that the op engine runs.
//
// Note [Direct view reads]
// For each pair of ranks, the block moves one of two ways, chosen identically on both sides from the block's size
// and whether the peer is a process of this host:
//   direct  (same host, at least UcxTuning::direct_min_bytes, and a host whose Yama ptrace_scope is 0 or absent:
//           scope 1 allows process_vm_readv on descendants only): two ranks that move blocks directly send each other
//           one message with their views of both directions (address, shape, strides, dtype of the block each sends
//           to the other and of the block each receives from it; slot 0), and check them against their own. Then,
//           per direction, the side whose view has more contiguous runs copies with one system call per up to
//           IOV_MAX runs per side: the receiver reads (process_vm_readv), or the sender writes
//           (process_vm_writev). The kernel pins the remote pages of every remote run separately, about half a
//           microsecond per run, while local runs are cheap: so the fragmented side copies and the remote side is
//           the more contiguous one (S(1) -> R reads whole remote blocks into strided rows; S(0) -> S(1) writes
//           strided rows into the peer's contiguous block). After its copies each side sends "done" (slot 3) and
//           completes only once the other's "done" came, so both views stay valid while they are copied and the
//           received data are in place when the call completes. One copy, no staging, two small messages per pair.
//           The copy of this rank's own block is deferred (Note [Deferred tasks] in op.cc): it runs after the
//           transfers whose descriptions came, while their "done" messages travel.
//   packed  (otherwise): the sender packs a strided view into scratch (or sends a contiguous one as it lies) as one
//           message (slot 2, sent even when empty so that mismatched counts are reported); the receiver receives
//           into its view when contiguous, else into scratch and unpacks.
// A peer dying under a copy is caught like UCX's own CMA copies (Note [CMA reads from a dead peer]).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "kernels/strided_view.h"

namespace dt::ucx {

class UcxOp;
class UcxWorker;
struct CommState;
struct Task;

// What a rank tells a reader about the view it may read: address, layout and dtype. Plain bytes on the wire.
struct ViewDesc {
  uint64_t addr = 0;
  int32_t ndim = 0;
  int32_t dtype = 0;
  int64_t shape[kernels::kMaxDims] = {};
  int64_t strides[kernels::kMaxDims] = {};
};

ViewDesc describe_view(const kernels::StridedView& v);

// Whether this host lets a process read and write the memory of its siblings (same user) with process_vm_readv /
// writev: not under Yama's ptrace_scope >= 1 (Ubuntu's default), which allows it for descendants only, and not when
// DT_UCX_DIRECT=0 (other security modules can forbid it too). Callers then move data as messages; logged once.
bool direct_copies_allowed();

// process_vm_readv (write: process_vm_writev) between this process and `comm`'s group rank `peer`, `bytes` in all.
// Throws dt::RemoteError naming the peer when the call fails or moves fewer bytes.
void move_iovecs(const UcxWorker& worker, const CommState& comm, int peer, const iovec* local, int nlocal,
                 const iovec* remote, int nremote, size_t bytes, bool write);
// One contiguous range: `bytes` at the peer's address `remote` into `local` (write: from `local` to `remote`).
void copy_with_peer(const UcxWorker& worker, const CommState& comm, int peer, void* local, uint64_t remote,
                    size_t bytes, bool write);

// Runs a kPack, kUnpack or kCopyView task of `op`.
void run_view_copy(const UcxOp& op, const Task& t);

// The direct move between this rank's view `mine` and the view `desc` of `comm`'s group rank `peer` (a process of
// this host); `i_send`: whether `mine` is the source. Copies when this side is the one to copy (Note [Direct view
// reads]), else does nothing. Throws dt::Error naming the peer when the views do not match (dtype, element count)
// or the system call fails.
void transfer_view(const UcxWorker& worker, const CommState& comm, int peer, const ViewDesc& desc,
                   const kernels::StridedView& mine, bool i_send);

}  // namespace dt::ucx
