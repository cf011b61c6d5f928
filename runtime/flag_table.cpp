#include "runtime/flag_table.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "runtime/memory_size.h"

namespace zt {

namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string did_you_mean(std::string_view name, const std::vector<std::string_view>& candidates) {
  std::string_view best;
  size_t best_distance = std::max<size_t>(2, name.size() / 4) + 1;
  for (const std::string_view candidate : candidates) {
    const size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best.empty() ? std::string() : str(" (did you mean '", best, "'?)");
}

int64_t parse_integer_flag(std::string_view flag, const std::string& text, int64_t minimum, int64_t maximum) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  ZT_CHECK(!text.empty() && end == text.c_str() + text.size() && errno == 0, "--", flag,
           " needs an integer, got '", text, "'");
  ZT_CHECK(value >= minimum, "--", flag, " must be at least ", minimum, ", got ", value);
  ZT_CHECK(value <= maximum, "--", flag, " must be at most ", maximum, ", got ", value);
  return value;
}

double parse_number_flag(std::string_view flag, const std::string& text, double minimum) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  ZT_CHECK(!text.empty() && end == text.c_str() + text.size() && errno == 0 && std::isfinite(value), "--",
           flag, " needs a number, got '", text, "'");
  ZT_CHECK(value >= minimum, "--", flag, " must be at least ", minimum, ", got ", text);
  return value;
}

size_t parse_size_flag(std::string_view flag, const std::string& text) {
  try {
    return parse_memory_size(text);
  } catch (const Error& e) {
    ZT_FAIL("--", flag, " needs a size such as 4GiB, got '", text, "': ", e.message());
  }
}

std::string parse_choice_flag(std::string_view flag, const std::string& text,
                              std::initializer_list<std::string_view> choices) {
  for (std::string_view choice : choices) {
    if (choice == text) return text;
  }
  std::string listed;
  for (std::string_view choice : choices) listed += (listed.empty() ? "" : ", ") + std::string(choice);
  ZT_FAIL("--", flag, " must be one of ", listed, ", got '", text, "'");
}

namespace flag_detail {

void fail_unknown(std::string_view arg, const std::vector<std::string_view>& names) {
  ZT_FAIL("unknown flag '--", arg, "'", did_you_mean(arg, names), "; see --help");
}

}  // namespace flag_detail
}  // namespace zt
