// A progress bar on stderr for the tools' long steps (export, preparation): "\rwhat [#####     ]  45.0% (x of y
// MiB, z MiB/s)", redrawn at most every 100 ms, ended by a newline at 100 %. Silent when stderr is not a terminal
// unless forced, so logs and pipes get one line, the last.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace dt::tools {

class ProgressBar {
 public:
  explicit ProgressBar(std::string what, bool force = false)
      : what_(std::move(what)), live_(force || ::isatty(2)), start_(Clock::now()) {}

  // (done, total) in bytes, as checkpoint::ExportOptions::progress reports them.
  void operator()(uint64_t done, uint64_t total) {
    const auto now = Clock::now();
    const bool last = done >= total;
    if (last && finished_) return;
    if (!last && (!live_ || now - drawn_ < std::chrono::milliseconds(100))) return;
    drawn_ = now;
    const double frac = total > 0 ? double(done) / double(total) : 1.0;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const int filled = int(frac * 30);
    std::fprintf(stderr, "%s%s [%-30s] %5.1f%% (%.1f of %.1f MiB, %.0f MiB/s)%s", live_ ? "\r" : "", what_.c_str(),
                 std::string(size_t(filled), '#').c_str(), 100 * frac, double(done) / kMiB, double(total) / kMiB,
                 secs > 0 ? double(done) / kMiB / secs : 0.0, last ? "\n" : "");
    std::fflush(stderr);
    finished_ = last;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr double kMiB = 1024.0 * 1024.0;
  std::string what_;
  bool live_;
  bool finished_ = false;
  Clock::time_point start_, drawn_{};
};

}  // namespace dt::tools
