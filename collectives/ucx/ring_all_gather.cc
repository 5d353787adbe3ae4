// Ring all-gather (collectives/algorithms/ring.h): step s, chunk c is slot s * chunks + c.
#include <algorithm>

#include "collectives/algorithms/ring.h"
#include "collectives/ucx/algorithms.h"

namespace dt::ucx {

namespace detail {

int64_t ring_chunks(int64_t count, size_t elem_size, int64_t chunk_bytes, int n) {
  int64_t c = algorithms::Chunking::chunks_for(count, int64_t(elem_size), chunk_bytes);
  return std::clamp<int64_t>(c, 1, std::max<int64_t>(1, 16384 / std::max(1, n - 1)));
}

void add_ring_all_gather(UcxOp& op, const RingLayout& L, char* out, const char* own_src,
                         const std::vector<int>& own_ready, const std::vector<std::vector<std::vector<int>>>* out_busy,
                         uint32_t slot_base) {
  namespace ring = algorithms::ring;
  const int n = op.size(), r = op.rank();
  const int64_t C = L.chunks;
  const size_t es = op.elem_size();
  const int left = ring::left(r, n), right = ring::right(r, n);
  const int steps = ring::steps(n);
  std::vector<int> recv_id(size_t(steps * C), -1);
  // Receives first: they are posted at once, so that every arriving chunk finds its place.
  for (int s = 0; s < steps; ++s) {
    const int b = ring::all_gather_recv_block(r, n, s);
    algorithms::Chunking ch(L.size[size_t(b)], C);
    for (int64_t c = 0; c < C; ++c) {
      const int id = op.recv(left, uint32_t(slot_base + s * C + c), out + (L.offset[size_t(b)] + ch.offset(c)) * es,
                             ch.size(c) * int64_t(es));
      recv_id[size_t(s * C + c)] = id;
      if (out_busy != nullptr)
        for (int t : (*out_busy)[size_t(b)][size_t(c)]) op.after(t, id);
    }
  }
  for (int s = 0; s < steps; ++s) {
    const int b = ring::all_gather_send_block(r, n, s);
    algorithms::Chunking ch(L.size[size_t(b)], C);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t bytes = ch.size(c) * int64_t(es);
      if (s == 0) {
        const int id = op.send(right, uint32_t(slot_base + c), own_src + ch.offset(c) * es, bytes);
        if (!own_ready.empty()) op.after(own_ready[size_t(c)], id);
      } else {
        // Forward what arrived in the previous step.
        const int id =
            op.send(right, uint32_t(slot_base + s * C + c), out + (L.offset[size_t(b)] + ch.offset(c)) * es, bytes);
        op.after(recv_id[size_t((s - 1) * C + c)], id);
      }
    }
  }
}

}  // namespace detail

void build_ring_all_gather(UcxOp& op, int64_t chunk_bytes) {
  const CollectiveArgs& a = op.args();
  const int n = op.size(), r = op.rank();
  const size_t es = op.elem_size();
  detail::RingLayout L(n);
  for (int b = 0; b < n; ++b) {
    L.offset.push_back(int64_t(b) * a.count);
    L.size.push_back(a.count);
  }
  // Two ranks: one step, nothing to forward, so one message per block is best.
  L.chunks = n == 2 ? 1 : detail::ring_chunks(a.count, es, chunk_bytes, n);
  char* out = static_cast<char*>(a.recv);
  const char* in = static_cast<const char*>(a.send);
  detail::add_ring_all_gather(op, L, out, in, {}, nullptr, 0);
  // Out of place: this rank's own block is copied while the messages fly.
  char* own = out + int64_t(r) * a.count * int64_t(es);
  if (own != in) op.copy(own, in, a.count * int64_t(es));
}

}  // namespace dt::ucx
