// The dtype table: one X-macro lists every element type once; everything else (names, sizes, dispatch) derives
// from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/half.h"

namespace dt {

// X(enum name, C++ type, short name, is floating point, long name, C API code, DLPack type code, safetensors name,
//   NCCL type)
// One row per dtype; a new dtype is one row here. The columns other floors need are plain tokens they paste onto
// their own prefixes, so core includes none of their headers:
//   long name        PyTorch's / NumPy's name ("float32"); dtype_from_name takes it; the Python package's key
//   C API code       dt_dtype_t: DT_<name> = <code> in api/dtensor/c_api.h (the ABI: a code never changes meaning;
//                    bindings/c_api/funnel.cc static_asserts each one, tests/bindings/c_api_drift.py checks the header
//                    and the Python package against these rows)
//   DLPack code      kDL<code> of dlpack.h; the bits are 8 * sizeof(C++ type) (bindings/c_api/dlpack.cc)
//   safetensors name the "dtype" of a safetensors header (dtensor/checkpoint/safetensors.cc)
//   NCCL type        nccl<type> (collectives/nccl/nccl_comm.cc; bool travels as bytes)
#define DT_FOR_EACH_DTYPE(X)                                                         \
  X(f32, float, "f32", true, "float32", FLOAT32, 0, Float, "F32", Float32)           \
  X(f64, double, "f64", true, "float64", FLOAT64, 1, Float, "F64", Float64)          \
  X(f16, Half, "f16", true, "float16", FLOAT16, 2, Float, "F16", Float16)            \
  X(bf16, BFloat16, "bf16", true, "bfloat16", BFLOAT16, 3, Bfloat, "BF16", Bfloat16) \
  X(i8, int8_t, "i8", false, "int8", INT8, 4, Int, "I8", Int8)                       \
  X(i32, int32_t, "i32", false, "int32", INT32, 5, Int, "I32", Int32)                \
  X(i64, int64_t, "i64", false, "int64", INT64, 6, Int, "I64", Int64)                \
  X(u8, uint8_t, "u8", false, "uint8", UINT8, 7, UInt, "U8", Uint8)                  \
  X(b8, bool, "bool", false, "bool", BOOL, 8, Bool, "BOOL", Uint8)

enum class DType : uint8_t {
#define DT_ENUM_(name, type, str, fp, ...) name,
  DT_FOR_EACH_DTYPE(DT_ENUM_)
#undef DT_ENUM_
};

inline constexpr int kNumDTypes = 0
#define DT_COUNT_(name, type, str, fp, ...) +1
    DT_FOR_EACH_DTYPE(DT_COUNT_)
#undef DT_COUNT_
    ;

constexpr size_t dtype_size(DType t) {
  switch (t) {
#define DT_SIZE_(name, type, str, fp, ...) \
  case DType::name:                        \
    return sizeof(type);
    DT_FOR_EACH_DTYPE(DT_SIZE_)
#undef DT_SIZE_
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
#define DT_NAME_(name, type, str, fp, ...) \
  case DType::name:                        \
    return str;
    DT_FOR_EACH_DTYPE(DT_NAME_)
#undef DT_NAME_
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  switch (t) {
#define DT_FP_(name, type, str, fp, ...) \
  case DType::name:                      \
    return fp;
    DT_FOR_EACH_DTYPE(DT_FP_)
#undef DT_FP_
  }
  return false;
}

// PyTorch's / NumPy's name: "float32", "bfloat16", "bool".
constexpr const char* dtype_long_name(DType t) {
  switch (t) {
#define DT_LONG_NAME_(name, type, str, fp, long_name, ...) \
  case DType::name:                                        \
    return long_name;
    DT_FOR_EACH_DTYPE(DT_LONG_NAME_)
#undef DT_LONG_NAME_
  }
  return "?";
}

// Whether `t` is one of the enumerators (a value cast from a wrong integer is not).
constexpr bool is_valid_dtype(DType t) { return int(t) < kNumDTypes; }

// Parses a short or long name ("f32", "float32", "bf16", "bfloat16", ...) or "float", "double", "half"; throws
// InvalidArgument naming the accepted names otherwise.
DType dtype_from_name(std::string_view name);

template <typename T>
struct DTypeOf;
#define DT_TRAIT_(name, type, str, fp, ...)     \
  template <>                                   \
  struct DTypeOf<type> {                        \
    static constexpr DType value = DType::name; \
  };
DT_FOR_EACH_DTYPE(DT_TRAIT_)
#undef DT_TRAIT_
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// The type used to accumulate T: f16/bf16 accumulate in float, everything else in itself.
template <typename T>
struct AccType {
  using type = T;
};
template <>
struct AccType<Half> {
  using type = float;
};
template <>
struct AccType<BFloat16> {
  using type = float;
};
template <typename T>
using acc_t = typename AccType<T>::type;

// Converts a double to T (16-bit floats go through float; bool is v != 0).
template <typename T>
DT_HOST_DEVICE inline T from_double(double v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <typename T>
DT_HOST_DEVICE inline double to_double(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

// Calls fn.template operator()<T>() with the C++ type of `t`:
//   dispatch_dtype(t, [&]<typename T>() { ... });
template <typename Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
#define DT_CASE_(name, type, str, fp, ...) \
  case DType::name:                        \
    return fn.template operator()<type>();
    DT_FOR_EACH_DTYPE(DT_CASE_)
#undef DT_CASE_
  }
  return fn.template operator()<float>();  // unreachable: every enumerator is handled above
}

}  // namespace dt
