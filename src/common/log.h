#pragma once
// Logging to stderr, each line with time and rank. Level from TUTTI_LOG,
// read once.

#include <sstream>
#include <string>

namespace tutti::detail {

enum class LogLevel { Off = 0, Warn = 1, Info = 2, Debug = 3, Trace = 4 };

LogLevel log_level();
void set_log_level(LogLevel level);
// The rank printed in every line (-1 until init knows it).
void set_log_rank(int rank);
void log_line(LogLevel level, const std::string& message);
LogLevel parse_log_level(const std::string& s);

}  // namespace tutti::detail

#define TUTTI_LOG(level, expr)                                                          \
  do {                                                                                  \
    if (::tutti::detail::log_level() >= ::tutti::detail::LogLevel::level) {             \
      std::ostringstream tutti_log_os_;                                                 \
      tutti_log_os_ << expr;                                                            \
      ::tutti::detail::log_line(::tutti::detail::LogLevel::level, tutti_log_os_.str()); \
    }                                                                                   \
  } while (0)
