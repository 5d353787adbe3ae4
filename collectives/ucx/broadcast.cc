// Broadcast (collectives/algorithms/broadcast.h): binomial tree for small messages (slot 0), pipelined chain for
// large ones (slot = chunk). Data lands in the caller's buffer and is forwarded from there.
#include "collectives/algorithms/broadcast.h"

#include <algorithm>

#include "collectives/ucx/algorithms.h"

namespace dt::ucx {

void build_binomial_broadcast(UcxOp& op) {
  const CollectiveArgs& a = op.args();
  const int n = op.size(), r = op.rank();
  const int64_t bytes = a.count * int64_t(op.elem_size());
  char* buf = static_cast<char*>(a.recv);
  const int v = algorithms::relative_rank(r, a.root, n);
  int got = -1;
  if (v != 0) got = op.recv(algorithms::absolute_rank(algorithms::binomial::parent(v), a.root, n), 0, buf, bytes);
  for (int child : algorithms::binomial::children(v, n)) {
    const int s = op.send(algorithms::absolute_rank(child, a.root, n), 0, buf, bytes);
    op.after(got, s);
  }
}

void build_chain_broadcast(UcxOp& op, int64_t chunk_bytes) {
  const CollectiveArgs& a = op.args();
  const int n = op.size(), r = op.rank();
  const size_t es = op.elem_size();
  char* buf = static_cast<char*>(a.recv);
  const int v = algorithms::relative_rank(r, a.root, n);
  // Two ranks: nothing is forwarded, so one message is best.
  const int64_t C =
      n == 2 ? 1 : std::min<int64_t>(algorithms::Chunking::chunks_for(a.count, int64_t(es), chunk_bytes), 16384);
  algorithms::Chunking ch(a.count, C);
  const int prev = algorithms::chain::prev(v), next = algorithms::chain::next(v, n);
  std::vector<int> got(size_t(C), -1);
  if (prev >= 0)
    for (int64_t c = 0; c < C; ++c)
      got[size_t(c)] = op.recv(algorithms::absolute_rank(prev, a.root, n), uint32_t(c), buf + ch.offset(c) * es,
                               ch.size(c) * int64_t(es));
  if (next >= 0)
    for (int64_t c = 0; c < C; ++c) {
      const int s = op.send(algorithms::absolute_rank(next, a.root, n), uint32_t(c), buf + ch.offset(c) * es,
                            ch.size(c) * int64_t(es));
      op.after(got[size_t(c)], s);
    }
}

}  // namespace dt::ucx
