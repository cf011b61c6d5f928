#include "runtime/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "runtime/check.h"

namespace zt {

Progress::Progress(std::string title, int64_t total_items, ProgressOptions options)
    : title_(std::move(title)), total_(total_items), options_(std::move(options)) {
  ZT_CHECK(options_.out != nullptr, "progress output must not be null");
  ZT_CHECK(total_items >= 0, "progress total must be non-negative, got ", total_items);
  terminal_ = options_.terminal.has_value() ? *options_.terminal : isatty(fileno(options_.out)) != 0;
  start_ = now();
  last_draw_ = start_;
}

Progress::~Progress() {
  try {
    finish();
  } catch (...) {  // never throw from a destructor; a lost progress line is harmless
  }
}

double Progress::now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Progress::elapsed_s() const {
  return now() - start_;
}

double Progress::items_per_second() const {
  double elapsed = elapsed_s();
  return elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
}

double Progress::eta_s() const {
  double rate = items_per_second();
  if (total_ <= 0 || rate <= 0) return -1.0;
  return static_cast<double>(std::max<int64_t>(total_ - done_, 0)) / rate;
}

std::string Progress::format_duration(double seconds) {
  if (!(seconds >= 0)) return "--:--";
  auto total = static_cast<int64_t>(std::floor(seconds));
  int64_t h = total / 3600, m = (total / 60) % 60, s = total % 60;
  char buffer[32];
  if (h > 0) {
    std::snprintf(buffer, sizeof buffer, "%lld:%02lld:%02lld", static_cast<long long>(h),
                  static_cast<long long>(m), static_cast<long long>(s));
  } else {
    std::snprintf(buffer, sizeof buffer, "%02lld:%02lld", static_cast<long long>(m),
                  static_cast<long long>(s));
  }
  return buffer;
}

void Progress::update(int64_t n_items, const ProgressMetrics& metrics) {
  ZT_CHECK(!finished_, "progress '", title_, "' updated after finish()");
  done_ += n_items;
  if (!metrics.empty()) metrics_ = metrics;
  double t = now();
  double interval = terminal_ ? options_.redraw_interval_s : options_.plain_interval_s;
  if (t - last_draw_ >= interval) {
    last_draw_ = t;
    draw(false);
  }
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  draw(true);
}

std::string Progress::status_text(bool final_line) const {
  std::ostringstream out;
  char number[64];
  const double fraction = total_ > 0 ? std::min(1.0, static_cast<double>(done_) / total_) : 0.0;
  const int percent = static_cast<int>(std::floor(fraction * 100.0));
  std::snprintf(number, sizeof number, "%.1f", items_per_second());
  if (terminal_) {
    int filled = static_cast<int>(std::lround(fraction * options_.bar_width));
    out << title_ << " [" << std::string(filled, '#') << std::string(options_.bar_width - filled, '.') << "] "
        << (percent < 10    ? "  "
            : percent < 100 ? " "
                            : "")
        << percent << "% " << done_ << "/" << total_ << "  " << number << " " << options_.unit << "/s  "
        << format_duration(elapsed_s());
    if (!final_line) out << "<" << format_duration(eta_s());
  } else {
    out << title_ << ": " << done_ << "/" << total_ << " (" << percent << "%) " << number << " "
        << options_.unit << "/s elapsed " << format_duration(elapsed_s());
    if (!final_line) out << " eta " << format_duration(eta_s());
  }
  for (const auto& [name, value] : metrics_) {
    std::snprintf(number, sizeof number, "%.4g", value);
    out << (terminal_ ? "  " : " ") << name << "=" << number;
  }
  if (final_line && !terminal_) out << " done";
  return out.str();
}

void Progress::draw(bool final_line) {
  std::string text = status_text(final_line);
  if (terminal_) {
    size_t width = text.size();
    if (width < last_width_) text.append(last_width_ - width, ' ');  // blank the rest of a longer old line
    last_width_ = width;
    std::fprintf(options_.out, "\r%s%s", text.c_str(), final_line ? "\n" : "");
  } else {
    std::fprintf(options_.out, "%s\n", text.c_str());
  }
  std::fflush(options_.out);
}

}  // namespace zt
