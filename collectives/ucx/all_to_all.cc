// Pairwise all-to-all and all-to-allv (collectives/algorithms/pairwise.h): every message goes straight from the
// sender's block to the receiver's block (slot 0; the sender's rank in the tag tells them apart). all_to_allv sends
// a message to every peer even when it is empty, so that mismatched counts are reported rather than waited for.
#include <cstring>

#include "collectives/algorithms/pairwise.h"
#include "collectives/ucx/algorithms.h"
#include "core/error.h"

namespace dt::ucx {

void build_pairwise_all_to_all(UcxOp& op) {
  const CollectiveArgs& a = op.args();
  const int n = op.size(), r = op.rank();
  const int64_t es = int64_t(op.elem_size());
  const bool v = a.kind == CollectiveKind::kAllToAllV;
  auto send_off = [&](int j) { return (v ? a.send_displs[size_t(j)] : int64_t(j) * a.count) * es; };
  auto send_len = [&](int j) { return (v ? a.send_counts[size_t(j)] : a.count) * es; };
  auto recv_off = [&](int j) { return (v ? a.recv_displs[size_t(j)] : int64_t(j) * a.count) * es; };
  auto recv_len = [&](int j) { return (v ? a.recv_counts[size_t(j)] : a.count) * es; };
  DT_CHECK_ARG(send_len(r) == recv_len(r), a.describe(), ": this rank sends ", send_len(r) / es,
               " elements to itself but expects ", recv_len(r) / es);

  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  // Overlapping buffers (in place): send from a snapshot of the input.
  int64_t send_extent = 0, recv_extent = 0;
  for (int j = 0; j < n; ++j) {
    send_extent = std::max(send_extent, send_off(j) + send_len(j));
    recv_extent = std::max(recv_extent, recv_off(j) + recv_len(j));
  }
  if (send != nullptr && recv != nullptr && send < recv + recv_extent && recv < send + send_extent) {
    char* snap = static_cast<char*>(op.scratch(send_extent));
    std::memcpy(snap, send, size_t(send_extent));
    send = snap;
  }
  for (int s = 1; s < n; ++s) {
    const int j = algorithms::pairwise::recv_peer(r, n, s);
    op.recv(j, 0, recv_len(j) ? recv + recv_off(j) : nullptr, recv_len(j));
  }
  for (int s = 1; s < n; ++s) {
    const int j = algorithms::pairwise::send_peer(r, n, s);
    op.send(j, 0, send_len(j) ? send + send_off(j) : nullptr, send_len(j));
  }
  if (send_len(r) > 0) op.copy(recv + recv_off(r), send + send_off(r), send_len(r));
}

}  // namespace dt::ucx
