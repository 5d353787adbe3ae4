#include "kernels/fill.h"

#include <cstring>

#include "kernels/dispatch_bits.h"
#include "kernels/layout.h"

namespace dt::kernels::cpu {

void fill(const StridedView& dst, uint64_t bits) {
  Layout l = make_layout(dst, nullptr);
  if (l.numel == 0) return;
  size_t es = dtype_size(dst.dtype);
  dispatch_bits(es, [&]<typename U>() {
    U v;
    std::memcpy(&v, &bits, sizeof(U));
    for_each_row(l, [&](const int64_t* off, int64_t n, const int64_t* st) {
      U* p = static_cast<U*>(dst.data) + off[0];
      if (st[0] == 1) {
        for (int64_t i = 0; i < n; ++i) p[i] = v;
      } else {
        for (int64_t i = 0; i < n; ++i) p[i * st[0]] = v;
      }
    });
  });
}

}  // namespace dt::kernels::cpu
