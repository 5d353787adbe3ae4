#include "kernels/chunk_cat.h"

#include <cstring>

#include "kernels/copy.h"

namespace dt::kernels::cpu {

void chunk_cat(std::span<const StridedView> inputs, void* out, DType out_dtype,
               std::span<const int64_t> padded_numels) {
  const size_t es = dtype_size(out_dtype);
  char* region = static_cast<char*>(out);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const StridedView& in = inputs[i];
    int64_t n = in.numel();
    int64_t padded = padded_numels.empty() ? n : padded_numels[i];
    if (n > 0) cpu::copy_cast(contiguous_view(region, in.sizes(), out_dtype), in);
    if (padded > n) std::memset(region + n * int64_t(es), 0, size_t(padded - n) * es);  // zero bits: 0 in every dtype
    region += padded * int64_t(es);
  }
}

void split_copy(const void* in, DType in_dtype, std::span<const int64_t> padded_numels,
                std::span<const StridedView> outputs) {
  const size_t es = dtype_size(in_dtype);
  const char* region = static_cast<const char*>(in);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const StridedView& o = outputs[i];
    int64_t n = o.numel();
    if (n > 0) cpu::copy_cast(o, contiguous_view(region, o.sizes(), in_dtype));
    region += (padded_numels.empty() ? n : padded_numels[i]) * int64_t(es);
  }
}

}  // namespace dt::kernels::cpu
