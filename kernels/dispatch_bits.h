// Calls fn.template operator()<U>() with the unsigned type of `size` bytes (1, 2, 4 or 8): data-movement kernels
// (copies, fills, gathers, masks) move bits, so one instantiation per element size serves every dtype.
// Host code; shared by the CPU and CUDA kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dt::kernels {

template <typename Fn>
inline void dispatch_bits(size_t size, Fn&& fn) {
  switch (size) {
    case 1:
      return fn.template operator()<uint8_t>();
    case 2:
      return fn.template operator()<uint16_t>();
    case 4:
      return fn.template operator()<uint32_t>();
    default:
      return fn.template operator()<uint64_t>();
  }
}

}  // namespace dt::kernels
