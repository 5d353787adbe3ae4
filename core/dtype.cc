#include "core/dtype.h"

#include "core/error.h"
#include "core/reduce_op.h"

namespace dt {

DType dtype_from_name(std::string_view name) {
#define DT_PARSE_(n, type, str, fp) \
  if (name == str) return DType::n;
  DT_FOR_EACH_DTYPE(DT_PARSE_)
#undef DT_PARSE_
  if (name == "float32" || name == "float") return DType::f32;
  if (name == "float64" || name == "double") return DType::f64;
  if (name == "float16" || name == "half") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "int32") return DType::i32;
  if (name == "int64") return DType::i64;
  DT_THROW(InvalidArgument, "unknown dtype '", name, "': expected one of f32, f64, f16, bf16, i8, i32, i64, u8, bool");
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
