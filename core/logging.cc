#include "core/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/config.h"
#include "core/error.h"

namespace dt {
namespace {

LogLevel level_from_env() {
  std::string v;
  try {
    v = config::get_string(config::Var::kLog);
  } catch (const Error& e) {
    // A log call must not throw: a malformed DT_LOG is reported once and the default level kept.
    std::fprintf(stderr, "dtensor: %s; using warn\n", e.what());
    return LogLevel::kWarn;
  }
  if (v == "error") return LogLevel::kError;
  if (v == "info") return LogLevel::kInfo;
  if (v == "debug") return LogLevel::kDebug;
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
