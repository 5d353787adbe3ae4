// What the CPU elementwise loops share (one file per op kind: elementwise_unary.cc, elementwise_binary.cc,
// elementwise_compare.cc, so that the heavy template instantiations compile in parallel).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/ops/functors.h"

namespace dt::kernels::cpu::elementwise_detail {

template <typename T>
constexpr bool float_type_v = ops_detail::is_fp_v<acc_t<T>>;

// Elements per chunk of a contiguous loop split over the intra-op threads (kernels/cpu/parallel.h).
constexpr int64_t kGrain = 16384;

}  // namespace dt::kernels::cpu::elementwise_detail
