// Per-segment wall-clock time of training steps: DeepSpeed's wall_clock_breakdown.
//
// Code marks the end of each segment; the time since the previous mark (or since start_step) is charged to
// the named segment and summed over the step's occurrences (every micro-batch's "forward" adds up):
//
//   WallClockBreakdown breakdown(/*synchronize_device=*/gpu);
//   WallClockScope on_this_thread(&breakdown);       // mark_wall_clock() on this thread now charges it
//   breakdown.start_step();
//   ... forward ...     mark_wall_clock("forward");
//   ... backward ...    mark_wall_clock("backward");
//   ... step ...        mark_wall_clock("optimizer");
//   for (auto& [segment, ms] : breakdown.take_mean_ms()) ...   // per step, since the last take
//
// Adding a segment is one call, mark_wall_clock("reduce"), at the point where it ends, anywhere in code the
// marking thread runs (a no-op on threads with no breakdown installed, so the calls can stay in shared code):
// what ran since the previous mark is then "reduce" instead of part of the next segment. The trainer
// installs the breakdown on rank 0's thread only; the other ranks' segments take the same time up to load
// imbalance, which shows up as time waiting in their collectives.
//
// On a GPU the marks synchronize the device before reading the clock (DeepSpeed's SynchronizedWallClockTimer
// does the same), so a segment is the time its kernels took, not the time to launch them; that stalls the
// queue, so it is only on when asked for. On the CPU the marks are plain steady_clock readings.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zt {

class WallClockBreakdown {
 public:
  explicit WallClockBreakdown(bool synchronize_device);

  // A step begins: the next mark measures from here, and the step count of the totals grows by one.
  void start_step();
  // Charges the time since the previous mark (or start_step) to `segment`.
  void mark(std::string_view segment);
  // Per segment, in the order segments were first marked: total ms since the last take divided by the
  // steps started since then. Clears the totals.
  std::vector<std::pair<std::string, double>> take_mean_ms();

 private:
  using Clock = std::chrono::steady_clock;
  void synchronize() const;

  bool synchronize_device_;
  Clock::time_point last_{};
  int64_t steps_ = 0;
  std::vector<std::pair<std::string, double>> total_ms_;  // few segments: a vector keeps their order
};

// The breakdown mark_wall_clock() charges on this thread (nullptr: none).
WallClockBreakdown* current_wall_clock_breakdown();
// mark() on this thread's breakdown; a no-op where none is installed.
void mark_wall_clock(std::string_view segment);

// Installs `breakdown` (may be nullptr) as this thread's until the scope ends, then restores the previous.
class WallClockScope {
 public:
  explicit WallClockScope(WallClockBreakdown* breakdown);
  ~WallClockScope();
  WallClockScope(const WallClockScope&) = delete;
  WallClockScope& operator=(const WallClockScope&) = delete;

 private:
  WallClockBreakdown* previous_;
};

}  // namespace zt
