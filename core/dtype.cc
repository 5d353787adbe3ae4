#include "core/dtype.h"

#include "core/error.h"
#include "core/reduce_op.h"

namespace dt {

DType dtype_from_name(std::string_view name) {
#define DT_PARSE_(n, type, str, fp, long_name, ...) \
  if (name == str || name == long_name) return DType::n;
  DT_FOR_EACH_DTYPE(DT_PARSE_)
#undef DT_PARSE_
  if (name == "float") return DType::f32;
  if (name == "double") return DType::f64;
  if (name == "half") return DType::f16;
  std::string known;
  for (int i = 0; i < kNumDTypes; ++i) known += std::string(i ? ", " : "") + dtype_name(DType(i));
  DT_THROW(InvalidArgument, "unknown dtype '", name, "': expected one of ", known,
           " (or PyTorch's names: float32, ...)");
}

ReduceOp reduce_op_from_name(std::string_view name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "avg" || name == "mean") return ReduceOp::kAvg;
  if (name == "max") return ReduceOp::kMax;
  if (name == "min") return ReduceOp::kMin;
  if (name == "product" || name == "prod") return ReduceOp::kProduct;
  DT_THROW(InvalidArgument, "unknown reduce op '", name, "': expected one of sum, avg, max, min, product");
}

}  // namespace dt
