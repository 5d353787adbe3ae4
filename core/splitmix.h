// splitmix64: the 64-bit mixing function behind the seeded fills (core/tensor_random.cc) and the tests' per-element
// generators. A bijection with good avalanche, so hash(seed, index) streams are reproducible on every rank and thread.
#pragma once

#include <cstdint>

namespace dt {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace dt
