#include "kernels/copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/convert.h"
#include "kernels/cpu/stream_copy.h"
#include "kernels/dispatch_bits.h"
#include "kernels/layout.h"

namespace dt::kernels::cpu {

namespace {
// Below this many bytes a row is copied by a loop: a memcpy call costs more than it saves.
constexpr int64_t kMemcpyMinBytes = 64;
constexpr int64_t kPrefetchMinRow = 512, kPrefetchMaxRow = 4096;

// Note [Tiled transposes]
// When dst is contiguous along one dim and src along another (a transpose), a row-by-row walk reads src with a
// large stride: one cache line per element. Walking kTile x kTile tiles of those two dims keeps the lines of both
// sides in L1 while they are used. Any order of the dims gives the same result (Note [Layout simplification]).
constexpr int64_t kTile = 32;

template <typename D, typename S, typename Elem>
bool try_tiled(const Layout& l, char* dst, const char* src, Elem&& elem) {
  const int inner = l.ndim - 1;
  if (l.ndim < 2 || l.strides[0][inner] != 1) return false;
  const int64_t sb = l.strides[1][inner];
  if (sb >= -1 && sb <= 1) return false;  // src already contiguous along the rows, or broadcast
  int j = -1;
  for (int d = inner - 1; d >= 0 && j < 0; --d)
    if (l.strides[1][d] == 1) j = d;
  if (j < 0 || l.shape[j] < kTile / 2 || l.shape[inner] < kTile / 2) return false;
  // The outer iteration space: every dim but the inner one, with the src-contiguous dim j last (the "rows").
  Layout outer;
  outer.nops = 2;
  outer.numel = l.numel / l.shape[inner];
  outer.ndim = inner;
  int k = 0;
  for (int d = 0; d < inner; ++d) {
    if (d == j) continue;
    outer.shape[k] = l.shape[d];
    outer.strides[0][k] = l.strides[0][d];
    outer.strides[1][k] = l.strides[1][d];
    ++k;
  }
  outer.shape[k] = l.shape[j];
  outer.strides[0][k] = l.strides[0][j];
  outer.strides[1][k] = 1;
  const int64_t nb = l.shape[inner];
  for_each_row(outer, [&](const int64_t* off, int64_t na, const int64_t* st) {
    D* dp = reinterpret_cast<D*>(dst) + off[0];
    const S* sp = reinterpret_cast<const S*>(src) + off[1];
    const int64_t da = st[0];
    for (int64_t a0 = 0; a0 < na; a0 += kTile) {
      const int64_t a1 = std::min(na, a0 + kTile);
      for (int64_t b0 = 0; b0 < nb; b0 += kTile) {
        const int64_t b1 = std::min(nb, b0 + kTile);
        for (int64_t a = a0; a < a1; ++a)
          for (int64_t b = b0; b < b1; ++b) dp[a * da + b] = elem(sp[a + b * sb]);
      }
    }
  });
  return true;
}

template <typename U>
void move_rows(const Layout& l, char* dst, const char* src) {
  if (try_tiled<U, U>(l, dst, src, [](U v) { return v; })) return;
  constexpr int64_t es = int64_t(sizeof(U));
  // Note [Streaming copies] (kernels/cpu/stream_copy.h): large copies of long enough rows bypass the cache.
  const bool stream = size_t(l.numel * es) >= kStreamMinBytes && size_t(l.shape[l.ndim - 1] * es) >= kStreamMinRun;
  // Note [Prefetching the next row]
  // Rows of 0.5-4 KiB that are not adjacent in memory copy 10-30 % slower than the same bytes in one piece (the
  // hardware prefetchers start over at every row; bench/redistribute's floor column). Requesting the destination's
  // next row while this row is copied takes that back, whichever side is strided: 256 KiB in rows of 0.5-4 KiB at
  // twice their size, cache-resident, 1.09-1.31x -> 0.94-1.08x a contiguous memcpy. Prefetching the source's next
  // row as well gains nothing; 8 KiB rows lose with it. Beyond the cache the streaming path takes over.
  const int64_t row_bytes = l.shape[l.ndim - 1] * es;
  const bool prefetch = !stream && l.ndim >= 2 && row_bytes >= kPrefetchMinRow && row_bytes <= kPrefetchMaxRow;
  char* prev = nullptr;
  for_each_row(l, [&](const int64_t* off, int64_t n, const int64_t* st) {
    char* d = dst + off[0] * es;
    const char* s = src + off[1] * es;
    const int64_t ds = st[0], ss = st[1];
    if (ds == 1 && ss == 1 && n * es >= kMemcpyMinBytes) {
      if (stream) {
        stream_copy(d, s, size_t(n * es));
        return;
      }
      if (prefetch) {
        if (prev != nullptr) {
          // The next row, guessed at this row's stride (a view's rows mostly are): a wrong guess costs only the
          // prefetches.
          const uintptr_t next = 2 * uintptr_t(d) - uintptr_t(prev);
          for (int64_t o = 0; o < row_bytes; o += 64)
            __builtin_prefetch(reinterpret_cast<const void*>(next + uintptr_t(o)), 1, 3);
        }
        prev = d;
      }
      std::memcpy(d, s, size_t(n * es));
      return;
    }
    U* dp = reinterpret_cast<U*>(d);
    const U* sp = reinterpret_cast<const U*>(s);
    if (ds == 1 && ss == 1) {
      for (int64_t i = 0; i < n; ++i) dp[i] = sp[i];
    } else if (ds == 1 && ss == 0) {
      const U v = sp[0];
      for (int64_t i = 0; i < n; ++i) dp[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) dp[i * ds] = sp[i * ss];
    }
  });
  if (stream) stream_fence();
}

template <typename D, typename S>
void convert_rows(const Layout& l, char* dst, const char* src) {
  if (try_tiled<D, S>(l, dst, src, [](S v) { return convert<D, S>(v); })) return;
  for_each_row(l, [&](const int64_t* off, int64_t n, const int64_t* st) {
    D* dp = reinterpret_cast<D*>(dst) + off[0];
    const S* sp = reinterpret_cast<const S*>(src) + off[1];
    const int64_t ds = st[0], ss = st[1];
    if (ds == 1 && ss == 1) {
      for (int64_t i = 0; i < n; ++i) dp[i] = convert<D, S>(sp[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dp[i * ds] = convert<D, S>(sp[i * ss]);
    }
  });
}
}  // namespace

void copy_cast(const StridedView& dst, const StridedView& src) {
  Layout l = make_layout(dst, &src);
  if (l.numel == 0) return;
  char* d = static_cast<char*>(dst.data);
  const char* s = static_cast<const char*>(src.data);
  if (dst.dtype == src.dtype) {
    dispatch_bits(dtype_size(dst.dtype), [&]<typename U>() { move_rows<U>(l, d, s); });
    return;
  }
  dispatch_dtype(dst.dtype,
                 [&]<typename D>() { dispatch_dtype(src.dtype, [&]<typename S>() { convert_rows<D, S>(l, d, s); }); });
}

}  // namespace dt::kernels::cpu
