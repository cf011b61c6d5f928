#include "optim/adamw_launch.h"

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <system_error>

#include "runtime/check.h"
#include "runtime/log.h"

namespace zt::optim {

namespace {

// A decimal integer spelled with digits only, the whole of `text`; 0 for anything else (and for values past
// int64, which no check below lets through either).
int64_t parse_digits(std::string_view text) {
  if (text.empty() || text.front() < '0' || text.front() > '9') return 0;  // from_chars takes a '-'
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return 0;
  return value;
}

}  // namespace

AdamWLaunch parse_adamw_grid(std::string_view text, std::string_view variable) {
  if (text.empty()) return {};
  const size_t comma = text.find(',');
  const int64_t blocks = comma == std::string_view::npos ? 0 : parse_digits(text.substr(0, comma));
  const int64_t threads = comma == std::string_view::npos ? 0 : parse_digits(text.substr(comma + 1));
  ZT_CHECK(blocks > 0 && threads > 0, variable, " must be BLOCKS,THREADS (two positive integers separated by",
           " a comma, e.g. 33,512), got '", text, "'");
  ZT_CHECK(blocks <= 65535, variable, "=BLOCKS,THREADS: BLOCKS must be at most 65535, got '", text, "'");
  ZT_CHECK(threads % 32 == 0 && threads <= 1024, variable,
           "=BLOCKS,THREADS: THREADS must be a multiple of 32 in [32, 1024], got '", text, "'");
  return {static_cast<int>(blocks), static_cast<int>(threads)};
}

AdamWLaunch overlap_adamw_launch() {
  static const AdamWLaunch launch = [] {
    const char* value = std::getenv(kOverlapAdamWGridVariable);
    const AdamWLaunch parsed =
        parse_adamw_grid(value == nullptr ? std::string_view() : value, kOverlapAdamWGridVariable);
    if (parsed.blocks > 0) {
      ZT_LOG(info) << kOverlapAdamWGridVariable << ": the overlapped AdamW runs on a bounded grid of "
                   << parsed.blocks << " blocks x " << parsed.threads << " threads";
    }
    return parsed;
  }();
  return launch;
}

}  // namespace zt::optim
