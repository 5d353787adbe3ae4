#include "core/process_memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace dt {

int64_t process_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return n == 2 ? int64_t(resident) * int64_t(sysconf(_SC_PAGESIZE)) : 0;
}

int64_t process_peak_rss_bytes() {
  struct rusage u {};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return int64_t(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace dt
