#include "runtime/memory_size.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "runtime/check.h"

namespace zt {

namespace {

struct Unit {
  std::string_view name;  // lower case
  double bytes;
};

constexpr double kKi = 1024.0;
constexpr std::array<Unit, 13> kUnits = {{
    {"b", 1.0},
    {"kb", 1e3},
    {"mb", 1e6},
    {"gb", 1e9},
    {"tb", 1e12},
    {"kib", kKi},
    {"mib", kKi* kKi},
    {"gib", kKi* kKi* kKi},
    {"tib", kKi* kKi* kKi* kKi},
    {"k", kKi},
    {"m", kKi* kKi},
    {"g", kKi* kKi* kKi},
    {"t", kKi* kKi* kKi* kKi},
}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

size_t parse_memory_size(std::string_view text) {
  std::string_view s = trim(text);
  ZT_CHECK(!s.empty(), "empty memory size");
  size_t number_end = 0;
  bool seen_dot = false;
  while (number_end < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[number_end])) || (s[number_end] == '.' && !seen_dot))) {
    seen_dot = seen_dot || s[number_end] == '.';
    ++number_end;
  }
  std::string_view number = s.substr(0, number_end);
  std::string unit(trim(s.substr(number_end)));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  ZT_CHECK(!number.empty() && number != ".", "memory size '", text,
           "' does not start with a non-negative number (expected e.g. 24GiB, 512MiB, 1.5GB or 4096)");

  double scale = 0;
  if (unit.empty()) {
    ZT_CHECK(!seen_dot, "memory size '", text, "' is a fractional number of bytes; add a unit (e.g. 1.5GiB)");
    scale = 1.0;
  } else {
    for (const Unit& u : kUnits)
      if (u.name == unit) scale = u.bytes;
    ZT_CHECK(scale > 0, "memory size '", text, "' has unknown unit '", unit,
             "' (known: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, K, M, G, T)");
  }

  if (!seen_dot && scale == 1.0) {  // plain integer: parse exactly, no double rounding
    size_t value = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    ZT_CHECK(ec == std::errc() && end == number.data() + number.size(), "memory size '", text,
             "' is out of range");
    return value;
  }
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  ZT_CHECK(ec == std::errc() && end == number.data() + number.size(), "cannot parse memory size '", text,
           "'");
  double bytes = std::round(value * scale);
  ZT_CHECK(bytes < static_cast<double>(std::numeric_limits<size_t>::max()), "memory size '", text,
           "' is out of range");
  return static_cast<size_t>(bytes);
}

std::string format_memory_size(size_t bytes) {
  static constexpr std::array<const char*, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= kKi && unit + 1 < kNames.size()) {
    value /= kKi;
    ++unit;
  }
  char buffer[48];
  if (unit == 0) {
    std::snprintf(buffer, sizeof buffer, "%zu B", bytes);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2f", value);
    std::string digits(buffer);  // strip trailing zeros: "24.00" -> "24", "1.50" -> "1.5"
    while (digits.back() == '0') digits.pop_back();
    if (digits.back() == '.') digits.pop_back();
    std::snprintf(buffer, sizeof buffer, "%s %s", digits.c_str(), kNames[unit]);
  }
  return buffer;
}

}  // namespace zt
