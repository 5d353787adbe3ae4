// Rank-prefixed logging with a level from DT_LOG (error, warn, info, debug; default warn).
#pragma once

#include <string>

#include "core/error.h"

namespace dt {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& message);

// The rank shown in log lines and error messages ("[r3] "). The process-wide rank is set once ranks exist; the
// thread backend runs several ranks in one process and sets a per-thread rank that overrides it (-1 clears it).
void set_process_rank(int rank);
void set_thread_rank(int rank);
int current_rank();  // -1 when unknown
std::string rank_prefix();

}  // namespace dt

#define DT_LOG_AT_(level, ...)                                                       \
  do {                                                                               \
    if (::dt::log_enabled(level)) ::dt::log_line(level, ::dt::str_cat(__VA_ARGS__)); \
  } while (0)
#define DT_LOG_ERROR(...) DT_LOG_AT_(::dt::LogLevel::kError, __VA_ARGS__)
#define DT_LOG_WARN(...) DT_LOG_AT_(::dt::LogLevel::kWarn, __VA_ARGS__)
#define DT_LOG_INFO(...) DT_LOG_AT_(::dt::LogLevel::kInfo, __VA_ARGS__)
#define DT_LOG_DEBUG(...) DT_LOG_AT_(::dt::LogLevel::kDebug, __VA_ARGS__)
