// The process's resident memory, as the benchmarks and training logs report it beside the allocator's figures.
#pragma once

#include <cstdint>

namespace dt {

// Resident set size now (/proc/self/statm), and its peak since the process started (getrusage ru_maxrss); 0 where
// the system does not say.
int64_t process_rss_bytes();
int64_t process_peak_rss_bytes();

}  // namespace dt
