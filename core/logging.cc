#include "core/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dt {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("DT_LOG");
  if (v == nullptr || *v == '\0') return LogLevel::kWarn;
  if (!std::strcmp(v, "error")) return LogLevel::kError;
  if (!std::strcmp(v, "warn") || !std::strcmp(v, "warning")) return LogLevel::kWarn;
  if (!std::strcmp(v, "info")) return LogLevel::kInfo;
  if (!std::strcmp(v, "debug")) return LogLevel::kDebug;
  std::fprintf(stderr, "dtensor: DT_LOG=%s is not one of error, warn, info, debug; using warn\n", v);
  return LogLevel::kWarn;
}

std::atomic<int>& level_ref() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

std::atomic<int> g_process_rank{-1};
thread_local int t_thread_rank = -1;

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kError:
      return "E";
    case LogLevel::kWarn:
      return "W";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kDebug:
      return "D";
  }
  return "?";
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_ref().load(std::memory_order_relaxed)); }
void set_log_level(LogLevel level) { level_ref().store(static_cast<int>(level)); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) <= level_ref().load(std::memory_order_relaxed); }

void set_process_rank(int rank) { g_process_rank.store(rank); }
void set_thread_rank(int rank) { t_thread_rank = rank; }
int current_rank() { return t_thread_rank >= 0 ? t_thread_rank : g_process_rank.load(); }
std::string rank_prefix() {
  int r = current_rank();
  return r >= 0 ? "[r" + std::to_string(r) + "] " : std::string();
}

void log_line(LogLevel level, const std::string& message) {
  static std::mutex mu;
  std::string line = rank_prefix() + "dtensor " + level_name(level) + ": " + message + "\n";
  std::lock_guard<std::mutex> lock(mu);
  std::fputs(line.c_str(), stderr);
}

}  // namespace dt
