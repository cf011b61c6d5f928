// Logging: timestamped lines on stderr with a level. ZT_LOG(info) << "loaded " << n << " rows";
#pragma once

#include <sstream>

namespace zt {

enum class LogLevel { debug, info, warn, error };

void set_log_level(LogLevel level);
LogLevel log_level();

class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& v) {
    out_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream out_;
};

}  // namespace zt

#define ZT_LOG(level)                              \
  if (::zt::LogLevel::level < ::zt::log_level()) { \
  } else                                           \
    ::zt::LogLine(::zt::LogLevel::level)
