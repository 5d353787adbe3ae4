// CRC-32C (Castagnoli), the checksum of checkpoint pages. The SSE4.2 instruction computes it where the CPU has it
// (checked at run time, whatever the build's -march), a table elsewhere; both give the same values.
//
//   uint32_t c = dt::crc32c(data, n);               // crc32c("123456789") == 0xE3069283
//   c = dt::crc32c(more, m, c);                     // extends: the CRC of data followed by more
//   dt::crc32c_pages(data, n, 65536, out.data());   // one CRC per 64 KiB page (the last may be short)
#pragma once

#include <cstddef>
#include <cstdint>

namespace dt {

// The CRC of n bytes continuing `crc` (the CRC of what came before; 0 for none).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// The number of pages of `page_bytes` that n bytes span (the last one may be short; 0 bytes have 0 pages).
size_t page_count(size_t n, size_t page_bytes);

// out[i] = crc32c of page i of [data, data + n). Pages are independent, so three are computed at once (the CRC
// instruction has a latency of three cycles and a throughput of one): about 3x the speed of one stream.
void crc32c_pages(const void* data, size_t n, size_t page_bytes, uint32_t* out);

}  // namespace dt
