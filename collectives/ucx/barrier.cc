// Dissemination barrier (collectives/algorithms/dissemination.h): round k is slot k, empty messages. Also the
// point-to-point message of send / recv (slot 0; the tag's sequence field counts the calls per peer and direction).
#include "collectives/algorithms/dissemination.h"
#include "collectives/ucx/algorithms.h"

namespace dt::ucx {

void build_dissemination_barrier(UcxOp& op) {
  const int n = op.size(), r = op.rank();
  int prev = -1;
  for (int k = 0; k < algorithms::dissemination::rounds(n); ++k) {
    const int v = op.recv(algorithms::dissemination::recv_peer(r, n, k), uint32_t(k), nullptr, 0);
    const int s = op.send(algorithms::dissemination::send_peer(r, n, k), uint32_t(k), nullptr, 0);
    op.after(prev, s);  // notify round k only after hearing from round k-1
    prev = v;
  }
}

void build_point_to_point(UcxOp& op) {
  const CollectiveArgs& a = op.args();
  const int64_t bytes = a.count * int64_t(op.elem_size());
  if (a.kind == CollectiveKind::kSend)
    op.send(a.peer, 0, a.send, bytes);
  else
    op.recv(a.peer, 0, a.recv, bytes);
}

}  // namespace dt::ucx
