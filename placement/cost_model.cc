#include "placement/cost_model.h"

namespace dt {

const char* step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::kAllGather:
      return "all_gather";
    case StepKind::kAllReduce:
      return "all_reduce";
    case StepKind::kReduceScatter:
      return "reduce_scatter";
    case StepKind::kLocalSlice:
      return "local_slice";
    case StepKind::kAllToAll:
      return "all_to_all";
    case StepKind::kLocalPartial:
      return "local_partial";
  }
  return "?";
}

bool is_collective(StepKind kind) { return kind != StepKind::kLocalSlice && kind != StepKind::kLocalPartial; }

int64_t CostModel::latency_terms(StepKind kind, int64_t group_size) {
  const int64_t hops = group_size > 1 ? group_size - 1 : 0;
  switch (kind) {
    case StepKind::kAllGather:
    case StepKind::kReduceScatter:
    case StepKind::kAllToAll:
      return hops;
    case StepKind::kAllReduce:
      return 2 * hops;
    case StepKind::kLocalSlice:
    case StepKind::kLocalPartial:
      return 0;
  }
  return 0;
}

double CostModel::cost(StepKind kind, int64_t group_size, int64_t bytes_moved, int64_t bytes_copied) const {
  return launch + alpha * static_cast<double>(latency_terms(kind, group_size)) +
         beta * static_cast<double>(bytes_moved) + copy_beta * static_cast<double>(bytes_copied);
}

}  // namespace dt
