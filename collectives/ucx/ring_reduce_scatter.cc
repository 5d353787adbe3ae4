// Ring reduce-scatter (collectives/algorithms/ring.h): step s, chunk c is slot s * chunks + c.
//
// Buffers: step 0 sends straight from the input. A middle step (groups above two) receives chunk c into one of two
// block-sized scratch buffers (alternating by step), combines it there with this rank's input and forwards it from
// there; chunk c of step s reuses the buffer of step s-2, so it waits until step s-1 sent that chunk on. The last
// step receives into `slots` chunk-sized buffers used round-robin and combines into the output while the chunk is
// still in cache.
#include <algorithm>

#include "collectives/algorithms/ring.h"
#include "collectives/ucx/algorithms.h"

namespace dt::ucx {

namespace detail {

ReduceScatterTasks add_ring_reduce_scatter(UcxOp& op, const RingLayout& L, const char* in, char* out, int slots,
                                           bool divide, uint32_t slot_base) {
  namespace ring = algorithms::ring;
  const int n = op.size(), r = op.rank();
  const int64_t C = L.chunks;
  const size_t es = op.elem_size();
  const int left = ring::left(r, n), right = ring::right(r, n);
  const int steps = ring::steps(n);

  ReduceScatterTasks out_tasks;
  out_tasks.final_chunk.assign(size_t(C), -1);
  out_tasks.input_readers.assign(size_t(n), std::vector<std::vector<int>>(size_t(C)));
  auto add_reader = [&](int b, int64_t c, int t) { out_tasks.input_readers[size_t(b)][size_t(c)].push_back(t); };

  int64_t max_block = 0, max_piece = 0;
  for (int b = 0; b < n; ++b) {
    max_block = std::max(max_block, L.size[size_t(b)]);
    max_piece = std::max(max_piece, algorithms::Chunking(L.size[size_t(b)], C).piece);
  }
  char* mid[2] = {nullptr, nullptr};
  if (steps > 1) {
    mid[0] = static_cast<char*>(op.scratch(max_block * int64_t(es)));
    mid[1] = static_cast<char*>(op.scratch(max_block * int64_t(es)));
  }
  const int K = int(std::clamp<int64_t>(slots, 1, C));
  char* slot_buf = static_cast<char*>(op.scratch(int64_t(K) * max_piece * int64_t(es)));

  auto chunk_of = [&](int b) { return algorithms::Chunking(L.size[size_t(b)], C); };
  auto in_ptr = [&](int b, int64_t c) { return in + (L.offset[size_t(b)] + chunk_of(b).offset(c)) * int64_t(es); };

  std::vector<int> recv_id(size_t(steps * C)), send_id(size_t(steps * C), -1), red_id(size_t(steps * C));
  std::vector<char*> land(size_t(steps * C));
  // Receives.
  for (int s = 0; s < steps; ++s) {
    const int b = ring::reduce_scatter_recv_block(r, n, s);
    auto ch = chunk_of(b);
    for (int64_t c = 0; c < C; ++c) {
      char* dst =
          s == steps - 1 ? slot_buf + (c % K) * max_piece * int64_t(es) : mid[s % 2] + ch.offset(c) * int64_t(es);
      land[size_t(s * C + c)] = dst;
      recv_id[size_t(s * C + c)] = op.recv(left, uint32_t(slot_base + s * C + c), dst, ch.size(c) * int64_t(es));
    }
  }
  // Step 0 sends this rank's input straight away.
  {
    const int b = ring::reduce_scatter_send_block(r, n, 0);
    auto ch = chunk_of(b);
    for (int64_t c = 0; c < C; ++c) {
      send_id[size_t(c)] = op.send(right, uint32_t(slot_base + c), in_ptr(b, c), ch.size(c) * int64_t(es));
      add_reader(b, c, send_id[size_t(c)]);
    }
  }
  // Combine, forward.
  for (int s = 0; s < steps; ++s) {
    const int b = ring::reduce_scatter_recv_block(r, n, s);
    auto ch = chunk_of(b);
    for (int64_t c = 0; c < C; ++c) {
      const size_t u = size_t(s * C + c);
      char* got = land[u];
      const int64_t cnt = ch.size(c);
      if (s < steps - 1) {
        red_id[u] = op.reduce(got, got, in_ptr(b, c), cnt);
        op.after(recv_id[u], red_id[u]);
        send_id[u + size_t(C)] = op.send(right, uint32_t(slot_base + (s + 1) * C + c), got, cnt * int64_t(es));
        op.after(red_id[u], send_id[u + size_t(C)]);
        // This buffer chunk held step s-2's chunk, which step s-1 forwarded: wait until that send is done.
        if (s >= 2) op.after(send_id[size_t((s - 1) * C + c)], recv_id[u]);
      } else {
        char* o = out + ch.offset(c) * int64_t(es);
        red_id[u] = op.reduce(o, got, in_ptr(b, c), cnt);
        op.after(recv_id[u], red_id[u]);
        // Slot reuse: chunk c lands where chunk c-K was combined.
        if (c >= K) op.after(red_id[size_t(s * C + c - K)], recv_id[u]);
        int last = red_id[u];
        if (divide) {
          last = op.divide(o, cnt);
          op.after(red_id[u], last);
        }
        out_tasks.final_chunk[size_t(c)] = last;
      }
      add_reader(b, c, red_id[u]);
    }
  }
  return out_tasks;
}

}  // namespace detail

void build_ring_reduce_scatter(UcxOp& op, int64_t chunk_bytes, int slots) {
  const CollectiveArgs& a = op.args();
  const int n = op.size();
  detail::RingLayout L(n);
  for (int b = 0; b < n; ++b) {
    L.offset.push_back(int64_t(b) * a.count);
    L.size.push_back(a.count);
  }
  L.chunks = detail::ring_chunks(a.count, op.elem_size(), chunk_bytes, n);
  detail::add_ring_reduce_scatter(op, L, static_cast<const char*>(a.send), static_cast<char*>(a.recv), slots,
                                  a.op == ReduceOp::kAvg, 0);
}

}  // namespace dt::ucx
