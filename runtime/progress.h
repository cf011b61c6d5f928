// A progress display for loops over items (training samples, evaluation batches, files).
//
//   Progress p("train epoch 1", n_samples);
//   for (...) p.update(batch_size, {{"loss", loss}, {"lr", lr}});
//   p.finish();
//
// On a terminal it redraws one line:
//   train epoch 1 [#########.........]  46% 1700/3668  212.3 samples/s  00:08<00:09  loss=0.5312 lr=2e-05
// When the output is not a terminal (logs, CI) it writes a plain line at most every `plain_interval_s`
// seconds, plus a final line on finish():
//   train epoch 1: 1700/3668 (46%) 212.3 samples/s elapsed 00:08 eta 00:09 loss=0.5312 lr=2e-05
// Rates are averages since the start. The clock and output are injectable for tests.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zt {

struct ProgressOptions {
  FILE* out = stderr;
  std::optional<bool> terminal;  // unset: isatty(fileno(out))
  double plain_interval_s = 10.0;
  double redraw_interval_s = 0.1;  // terminal mode: at most this often
  std::string unit = "samples";    // shown as "<unit>/s"
  int bar_width = 30;
  std::function<double()> clock;  // seconds, monotonic; unset: std::chrono::steady_clock
};

using ProgressMetrics = std::vector<std::pair<std::string, double>>;

class Progress {
 public:
  Progress(std::string title, int64_t total_items, ProgressOptions options = {});
  ~Progress();  // finishes if finish() was not called
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Adds n_items done; metrics replace the previously shown ones (an empty list keeps them).
  void update(int64_t n_items, const ProgressMetrics& metrics = {});
  void finish();  // prints the final line once

  int64_t done() const { return done_; }
  double elapsed_s() const;
  double items_per_second() const;  // 0 before any time has passed
  // Seconds left at the average rate so far; negative when unknown (no rate yet or no total).
  double eta_s() const;

  // "00:08", "12:34", "1:02:03".
  static std::string format_duration(double seconds);

 private:
  double now() const;
  void draw(bool final_line);
  std::string status_text(bool final_line) const;

  std::string title_;
  int64_t total_;
  ProgressOptions options_;
  bool terminal_ = false;
  double start_ = 0;
  double last_draw_ = 0;
  int64_t done_ = 0;
  ProgressMetrics metrics_;
  bool finished_ = false;
  size_t last_width_ = 0;  // terminal mode: characters of the previous line, to blank leftovers
};

}  // namespace zt
