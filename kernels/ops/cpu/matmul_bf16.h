// CPU bf16 GEMM (Note [bf16 GEMM on the CPU] in matmul_bf16.cc): oneDNN where the build has it and the CPU multiplies
// bf16 natively.
#pragma once

#include "kernels/ops/matmul.h"

namespace dt::kernels::cpu {

// True when bf16 products run natively here (decided once per process).
bool has_bf16_gemm();

// C's rows [r0, r1) x columns [c0, c1), every batch, of a bf16 GEMM (alpha any, beta 0 or 1); one oneDNN call on the
// calling thread. Only when has_bf16_gemm().
void gemm_bf16_block(const GemmArgs& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

}  // namespace dt::kernels::cpu
