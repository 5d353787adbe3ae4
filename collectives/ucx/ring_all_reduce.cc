// Ring all-reduce: the reduce-scatter ring (slots 0 .. (n-1)*chunks - 1) then the all-gather ring (slots from
// (n-1)*chunks), over blocks of ceil(count / n) elements (trailing blocks may be short or empty). The all-gather of
// chunk c starts as soon as chunk c of this rank's block is final, so the two phases overlap.
//
// In place (send == recv), the all-gather overwrites input blocks the reduce-scatter still reads: each received
// chunk waits for the tasks reading that chunk of the input.
#include "collectives/algorithms/ring.h"
#include "collectives/ucx/algorithms.h"

namespace dt::ucx {

void build_ring_all_reduce(UcxOp& op, int64_t chunk_bytes, int slots) {
  const CollectiveArgs& a = op.args();
  const int n = op.size(), r = op.rank();
  const size_t es = op.elem_size();
  algorithms::Blocks blocks(a.count, n);
  detail::RingLayout L(n);
  for (int b = 0; b < n; ++b) {
    L.offset.push_back(blocks.offset(b));
    L.size.push_back(blocks.size(b));
  }
  L.chunks = detail::ring_chunks(blocks.block, es, chunk_bytes, n);
  const char* in = static_cast<const char*>(a.send);
  char* out = static_cast<char*>(a.recv);
  char* own = out + blocks.offset(r) * int64_t(es);
  auto rs = detail::add_ring_reduce_scatter(op, L, in, own, slots, a.op == ReduceOp::kAvg, 0);
  const bool in_place = static_cast<const void*>(in) == static_cast<const void*>(out);
  detail::add_ring_all_gather(op, L, out, own, rs.final_chunk, in_place ? &rs.input_readers : nullptr,
                              uint32_t((n - 1) * L.chunks));
}

}  // namespace dt::ucx
