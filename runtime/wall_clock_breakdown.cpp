#include "runtime/wall_clock_breakdown.h"

#include <algorithm>

#include "runtime/device.h"

namespace zt {

namespace {
thread_local WallClockBreakdown* tls_breakdown = nullptr;
}  // namespace

WallClockBreakdown::WallClockBreakdown(bool synchronize_device) : synchronize_device_(synchronize_device) {}

void WallClockBreakdown::synchronize() const {
  if (synchronize_device_) device_synchronize();
}

void WallClockBreakdown::start_step() {
  synchronize();
  last_ = Clock::now();
  ++steps_;
}

void WallClockBreakdown::mark(std::string_view segment) {
  synchronize();
  const Clock::time_point now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - last_).count();
  last_ = now;
  auto it =
      std::find_if(total_ms_.begin(), total_ms_.end(), [&](const auto& t) { return t.first == segment; });
  if (it == total_ms_.end()) {
    total_ms_.emplace_back(std::string(segment), ms);
  } else {
    it->second += ms;
  }
}

std::vector<std::pair<std::string, double>> WallClockBreakdown::take_mean_ms() {
  std::vector<std::pair<std::string, double>> mean = std::move(total_ms_);
  total_ms_.clear();
  const double steps = static_cast<double>(std::max<int64_t>(steps_, 1));
  for (auto& [segment, ms] : mean) ms /= steps;
  steps_ = 0;
  return mean;
}

WallClockBreakdown* current_wall_clock_breakdown() {
  return tls_breakdown;
}

void mark_wall_clock(std::string_view segment) {
  if (tls_breakdown != nullptr) tls_breakdown->mark(segment);
}

WallClockScope::WallClockScope(WallClockBreakdown* breakdown) : previous_(tls_breakdown) {
  tls_breakdown = breakdown;
}

WallClockScope::~WallClockScope() {
  tls_breakdown = previous_;
}

}  // namespace zt
