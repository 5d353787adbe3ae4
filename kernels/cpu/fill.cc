#include "kernels/fill.h"

#include <cstring>

#include "kernels/cpu/loops.h"
#include "kernels/layout.h"

namespace dt::kernels::cpu {

void fill(const StridedView& dst, uint64_t bits) {
  Layout l = make_layout(dst, nullptr);
  if (l.numel == 0) return;
  size_t es = dtype_size(dst.dtype);
  dispatch_bits(es, [&]<typename U>() {
    U v;
    std::memcpy(&v, &bits, sizeof(U));
    for_each_row(l, static_cast<char*>(dst.data), sizeof(U), nullptr, 0,
                 [&](char* d, const char*, int64_t n, int64_t ds, int64_t) {
                   U* p = reinterpret_cast<U*>(d);
                   if (ds == 1) {
                     for (int64_t i = 0; i < n; ++i) p[i] = v;
                   } else {
                     for (int64_t i = 0; i < n; ++i) p[i * ds] = v;
                   }
                 });
  });
}

}  // namespace dt::kernels::cpu
