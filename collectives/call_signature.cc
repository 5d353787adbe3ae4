#include "collectives/call_signature.h"

#include <sstream>

namespace dt {

namespace {
bool reduces(CollectiveKind k) { return k == CollectiveKind::kAllReduce || k == CollectiveKind::kReduceScatter; }
}  // namespace

CallSignature CallSignature::of(const CollectiveArgs& a) {
  CallSignature s;
  s.kind = a.kind;
  if (a.kind == CollectiveKind::kBarrier) return s;
  s.views = a.has_views();
  s.segments = a.has_segments();
  s.count = a.kind == CollectiveKind::kAllToAllV || s.views ? 0 : a.count;
  s.dtype = a.dtype;
  if (reduces(a.kind)) s.op = a.op;
  if (a.kind == CollectiveKind::kBroadcast) s.root = a.root;
  return s;
}

CallSignature CallSignature::of_split() {
  CallSignature s;
  s.split = true;
  return s;
}

std::string CallSignature::describe() const {
  if (split) return "split()";
  if (kind == CollectiveKind::kBarrier) return "barrier()";
  std::ostringstream os;
  os << collective_kind_name(kind) << "(";
  if (count != 0 || (kind != CollectiveKind::kAllToAllV && !views)) os << "count=" << count << ", ";
  os << dtype_name(dtype);
  if (reduces(kind)) os << ", " << reduce_op_name(op);
  if (kind == CollectiveKind::kBroadcast) os << ", root=" << root;
  if (views) os << ", strided views";
  if (segments) os << ", segments";
  os << ")";
  return os.str();
}

uint32_t CallSignature::digest() const {
  uint32_t h = uint32_t(dtype) * 7u + (segments ? 11u : 0u);
  if (reduces(kind)) h += uint32_t(op) * 3u + 1u;
  if (kind == CollectiveKind::kBroadcast) h += uint32_t(root) * 5u + 2u;
  return (h ^ (h >> 4) ^ (h >> 8)) & 0xFu;
}

void CallSignature::to_ints(int64_t* out) const {
  out[0] = int64_t(kind);
  out[1] = split;
  out[2] = int64_t(views) | (int64_t(segments) << 1);
  out[3] = count;
  out[4] = int64_t(dtype);
  out[5] = int64_t(op);
  out[6] = root;
}

CallSignature CallSignature::from_ints(const int64_t* in) {
  CallSignature s;
  s.kind = CollectiveKind(in[0]);
  s.split = in[1] != 0;
  s.views = (in[2] & 1) != 0;
  s.segments = (in[2] & 2) != 0;
  s.count = in[3];
  s.dtype = DType(in[4]);
  s.op = ReduceOp(in[5]);
  s.root = int(in[6]);
  return s;
}

}  // namespace dt
