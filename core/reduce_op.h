// Reduction operators shared by Partial placements, kernels and collectives.
#pragma once

#include <cstdint>
#include <string_view>

namespace dt {

enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin, kProduct };

constexpr const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kProduct:
      return "product";
  }
  return "?";
}

// Parses "sum", "avg", "max", "min", "product" (also "prod"); throws InvalidArgument otherwise.
ReduceOp reduce_op_from_name(std::string_view name);

}  // namespace dt
