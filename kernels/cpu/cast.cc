#include "kernels/cast.h"

#include <cstring>

#include "kernels/convert.h"

namespace dt::kernels::cpu {

void cast(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t count) {
  if (dst_dtype == src_dtype) {
    std::memcpy(dst, src, size_t(count) * dtype_size(dst_dtype));
    return;
  }
  dispatch_dtype(dst_dtype, [&]<typename D>() {
    dispatch_dtype(src_dtype, [&]<typename S>() {
      D* d = static_cast<D*>(dst);
      const S* s = static_cast<const S*>(src);
      for (int64_t i = 0; i < count; ++i) d[i] = convert<D, S>(s[i]);
    });
  });
}

}  // namespace dt::kernels::cpu
