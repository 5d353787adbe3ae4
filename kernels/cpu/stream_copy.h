// Internal to kernels (and the host backends' copies, through kernels::copy_bytes): copies whose stores bypass the
// cache.
//
// Note [Streaming copies]
// A copy of a large buffer with ordinary stores first reads every destination line into the cache (read for
// ownership), then writes it back: three memory transfers per line where two suffice. glibc's memcpy switches to
// non-temporal stores only above a threshold scaled from the L3 size, which on a big shared L3 (this machine's:
// 260 MiB) is never reached, and a strided copy made of row-sized memcpy calls never switches at all. Non-temporal
// stores beat both a contiguous memcpy and copies of short rows. But the copy's destination then is not in the
// cache, and a reader that follows pays for it: a copy plus one read of the result is slower streamed up to about
// 16 MiB and faster only beyond. So only copies of at least kStreamMinBytes in all stream, and only their rows of
// at least kStreamMinRun bytes.
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
