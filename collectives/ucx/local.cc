// A group of one: the result is the input (avg divides by 1), so only out-of-place layouts need a copy.
#include "collectives/ucx/algorithms.h"
#include "core/error.h"

namespace dt::ucx {

void build_local(UcxOp& op) {
  const CollectiveArgs& a = op.args();
  const int64_t es = int64_t(op.elem_size());
  switch (a.kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kAllToAll:
      if (a.count > 0 && a.send != a.recv) op.copy(a.recv, a.send, a.count * es);
      break;
    case CollectiveKind::kAllToAllV: {
      DT_CHECK_ARG(a.send_counts[0] == a.recv_counts[0], a.describe(), ": this rank sends ", a.send_counts[0],
                   " elements to itself but expects ", a.recv_counts[0]);
      if (a.send_counts[0] > 0)
        op.copy(static_cast<char*>(a.recv) + a.recv_displs[0] * es,
                static_cast<const char*>(a.send) + a.send_displs[0] * es, a.send_counts[0] * es);
      break;
    }
    default:
      break;
  }
}

}  // namespace dt::ucx
