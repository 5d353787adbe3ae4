// Internal to kernels (and the host backends' copies, through kernels::copy_bytes): copies whose stores bypass the
// cache.
//
// Note [Streaming copies]
// A copy of a large buffer with ordinary stores first reads every destination line into the cache (read for
// ownership), then writes it back: three memory transfers per line where two suffice. glibc's memcpy switches to
// non-temporal stores only above a threshold scaled from the L3 size, which on a big shared L3 (this machine's:
// 260 MiB) is never reached, and a strided copy made of row-sized memcpy calls never switches at all. Measured here
// (32 MiB): contiguous memcpy 2.4 ms; rows of 2 KiB 3.0 ms, of 1 KiB 3.4-4.4 ms; the same rows with non-temporal
// stores 2.0 ms. But the copy's destination then is not in the cache, and a reader that follows pays for it: copy
// plus one read of the result took 0.48 ms with memcpy against 0.82 ms streamed at 4 MiB, 1.06 against 1.56 ms at
// 8 MiB, 2.9 against 3.0 ms at 16 MiB, 28.8 against 27.4 ms at 64 MiB. So only copies of at least kStreamMinBytes
// in all stream, and only their rows of at least kStreamMinRun bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dt::kernels::cpu {

inline constexpr size_t kStreamMinBytes = size_t(16) << 20;
inline constexpr size_t kStreamMinRun = 256;

// Copies n bytes with non-temporal stores where the target supports them (memcpy otherwise). Call stream_fence()
// once after the last stream_copy of a batch, before the data is handed to another thread or process.
void stream_copy(void* dst, const void* src, size_t n);
void stream_fence();

// memcpy below kStreamMinBytes, stream_copy + stream_fence from there on.
void large_copy(void* dst, const void* src, size_t n);

}  // namespace dt::kernels::cpu
