#include "runtime/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace zt {

namespace {
std::atomic<LogLevel> g_level{LogLevel::info};
std::mutex g_mutex;
const char* level_tag(LogLevel l) {
  switch (l) {
    case LogLevel::debug:
      return "D";
    case LogLevel::info:
      return "I";
    case LogLevel::warn:
      return "W";
    case LogLevel::error:
      return "E";
  }
  return "?";
}
}  // namespace

void set_log_level(LogLevel level) {
  g_level = level;
}
LogLevel log_level() {
  return g_level;
}

LogLine::~LogLine() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "[%s %s] %s\n", level_tag(level_), stamp, out_.str().c_str());
}

}  // namespace zt
