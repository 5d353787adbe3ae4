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

// Whether `op` is one of the enumerators (a value cast from a wrong integer is not).
constexpr bool is_valid_reduce_op(ReduceOp op) { return uint8_t(op) <= uint8_t(ReduceOp::kProduct); }

// Parses "sum", "avg", "max", "min", "product" (also "prod"); throws InvalidArgument otherwise.
ReduceOp reduce_op_from_name(std::string_view name);

}  // namespace dt
