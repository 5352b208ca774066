#include "common/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "common/settings.h"

namespace tutti::detail {
namespace {

LogLevel initial_level() {
  const std::string v = setting_env("TUTTI_LOG");
  return v.empty() ? LogLevel::Warn : parse_log_level(v);
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(initial_level())};
  return level;
}

std::atomic<int> g_rank{-1};

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::Warn:
      return "WARN";
    case LogLevel::Info:
      return "INFO";
    case LogLevel::Debug:
      return "DEBUG";
    case LogLevel::Trace:
      return "TRACE";
    default:
      return "";
  }
}

}  // namespace

LogLevel parse_log_level(const std::string& s) {
  if (s == "off" || s == "none") return LogLevel::Off;
  if (s == "warn" || s == "warning") return LogLevel::Warn;
  if (s == "info") return LogLevel::Info;
  if (s == "debug") return LogLevel::Debug;
  if (s == "trace") return LogLevel::Trace;
  return LogLevel::Warn;
}

LogLevel log_level() { return static_cast<LogLevel>(level_storage().load(std::memory_order_relaxed)); }
void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level)); }
void set_log_rank(int rank) { g_rank.store(rank); }

void log_line(LogLevel level, const std::string& message) {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  tm t{};
  localtime_r(&tv.tv_sec, &t);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%06ld", t.tm_hour, t.tm_min, t.tm_sec,
                static_cast<long>(tv.tv_usec));
  // One write per line so lines of concurrent ranks do not interleave.
  std::string line = std::string("[tutti ") + stamp + " rank " + std::to_string(g_rank.load()) + " pid " +
                     std::to_string(getpid()) + " " + level_name(level) + "] " + message + "\n";
  ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
}

}  // namespace tutti::detail
