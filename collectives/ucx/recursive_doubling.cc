// Recursive-doubling all-reduce for small messages (collectives/algorithms/recursive_doubling.h): whole buffers,
// log2(n) exchanges. Slots: 0 the fold (extra rank -> its partner), 1 + k round k, 100 the result sent back to the
// extra rank.
#include "collectives/algorithms/recursive_doubling.h"

#include "collectives/ucx/algorithms.h"

namespace dt::ucx {

void build_recursive_doubling_all_reduce(UcxOp& op) {
  const CollectiveArgs& a = op.args();
  const int n = op.size(), r = op.rank();
  const int64_t bytes = a.count * int64_t(op.elem_size());
  algorithms::RecursiveDoubling rd(r, n);
  const char* in = static_cast<const char*>(a.send);
  char* out = static_cast<char*>(a.recv);
  constexpr uint32_t kFoldSlot = 0, kBackSlot = 100;

  if (rd.is_extra()) {
    const int s = op.send(rd.fold_partner(), kFoldSlot, in, bytes);
    const int v = op.recv(rd.fold_partner(), kBackSlot, out, bytes);
    if (static_cast<const void*>(in) == static_cast<const void*>(out)) op.after(s, v);  // in place: send first
    return;
  }
  // One receive buffer per round (and the fold), so that every receive is posted at once.
  const int rounds = rd.rounds();
  char* tmp = static_cast<char*>(op.scratch(int64_t(rounds + 1) * bytes));
  const char* cur = in;  // this rank's partial result so far
  int last = -1;         // the task that produced `cur`
  if (rd.fold_partner() >= 0) {
    const int v = op.recv(rd.fold_partner(), kFoldSlot, tmp, bytes);
    last = op.reduce(out, tmp, in, a.count);  // the extra rank is the lower one
    op.after(v, last);
    cur = out;
  }
  for (int k = 0; k < rounds; ++k) {
    const int peer = rd.partner(k);
    char* buf = tmp + int64_t(k + 1) * bytes;
    const int v = op.recv(peer, 1 + uint32_t(k), buf, bytes);
    const int s = op.send(peer, 1 + uint32_t(k), cur, bytes);
    op.after(last, s);
    const int red = rd.lower_in(k) ? op.reduce(out, cur, buf, a.count) : op.reduce(out, buf, cur, a.count);
    op.after(v, red);
    op.after(last, red);
    // out may be what was just sent: combine only once the peer has it.
    if (static_cast<const void*>(cur) == static_cast<const void*>(out)) op.after(s, red);
    last = red;
    cur = out;
  }
  if (a.op == ReduceOp::kAvg) {
    const int d = op.divide(out, a.count);
    op.after(last, d);
    last = d;
  }
  if (rd.fold_partner() >= 0) {
    const int s = op.send(rd.fold_partner(), kBackSlot, out, bytes);
    op.after(last, s);
  }
}

}  // namespace dt::ucx
