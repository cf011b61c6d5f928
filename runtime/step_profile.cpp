#include "runtime/step_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "runtime/check.h"
#include "runtime/device.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>

#include "runtime/cuda_check.h"
#include "runtime/stream.h"
#endif

namespace zt {

namespace {

int64_t host_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StepProfile::StepProfile() {
  const char* env = std::getenv("ZT_PROFILE");
  if (env != nullptr && std::string_view(env) != "0" && !std::string_view(env).empty()) enable(true);
}

namespace {
thread_local bool t_profile_disabled = false;
}  // namespace

StepProfile& StepProfile::global() {
  if (t_profile_disabled) {
    thread_local StepProfile off = [] {
      StepProfile p;
      p.enable(false);
      return p;
    }();
    return off;
  }
  static StepProfile profile;
  return profile;
}

void StepProfile::disable_on_this_thread() {
  t_profile_disabled = true;
}

void StepProfile::enable(bool on) {
  enabled_ = on;
#ifdef ZT_WITH_CUDA
  use_events_ = on && cuda_available();
#endif
}

void StepProfile::mark_start() {
  if (!enabled_) return;
  mark("");
}

void StepProfile::mark(std::string_view segment) {
  if (!enabled_) return;
  Pending p{std::string(segment), nullptr, 0};
#ifdef ZT_WITH_CUDA
  if (use_events_) {
    cudaEvent_t event = nullptr;
    if (free_events_.empty()) {
      ZT_CUDA_CHECK(cudaEventCreate(&event));
    } else {
      event = static_cast<cudaEvent_t>(free_events_.back());
      free_events_.pop_back();
    }
    ZT_CUDA_CHECK(cudaEventRecord(event, current_stream()));
    p.event = event;
  }
#endif
  if (!use_events_) p.host_ns = host_now_ns();
  pending_.push_back(std::move(p));
}

void StepProfile::collect() {
  if (!enabled_ || pending_.empty()) return;
#ifdef ZT_WITH_CUDA
  if (use_events_) ZT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(pending_.back().event)));
#endif
  for (size_t i = 1; i < pending_.size(); ++i) {
    const Pending& a = pending_[i - 1];
    const Pending& b = pending_[i];
    if (b.segment.empty()) continue;  // a new start: nothing is charged across it
    double ms = 0;
#ifdef ZT_WITH_CUDA
    if (use_events_) {
      float elapsed = 0;
      ZT_CUDA_CHECK(cudaEventElapsedTime(&elapsed, static_cast<cudaEvent_t>(a.event),
                                         static_cast<cudaEvent_t>(b.event)));
      ms = elapsed;
    }
#endif
    if (!use_events_) ms = static_cast<double>(b.host_ns - a.host_ns) * 1e-6;
    total_ms_[b.segment] += ms;
  }
  for (const Pending& p : pending_) {
    if (p.event != nullptr) free_events_.push_back(p.event);
  }
  pending_.clear();
  ++collected_steps_;
}

std::string StepProfile::report() const {
  std::vector<std::pair<std::string, double>> rows(total_ms_.begin(), total_ms_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  double total = 0;
  for (const auto& row : rows) total += row.second;
  const double steps = static_cast<double>(std::max<int64_t>(collected_steps_, 1));
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof line, "%-28s %12s %12s %7s\n", "segment", "total ms", "ms/step", "share");
  out << line;
  for (const auto& [name, ms] : rows) {
    std::snprintf(line, sizeof line, "%-28s %12.2f %12.3f %6.1f%%\n", name.c_str(), ms, ms / steps,
                  total > 0 ? 100.0 * ms / total : 0.0);
    out << line;
  }
  std::snprintf(line, sizeof line, "%-28s %12.2f %12.3f  (%lld steps, %s)\n", "all", total, total / steps,
                static_cast<long long>(collected_steps_), use_events_ ? "device events" : "host clock");
  out << line;
  return out.str();
}

std::map<std::string, double> StepProfile::ms_per_step() const {
  const double steps = static_cast<double>(std::max<int64_t>(collected_steps_, 1));
  std::map<std::string, double> out;
  for (const auto& [name, ms] : total_ms_) out[name] = ms / steps;
  return out;
}

void StepProfile::reset() {
  total_ms_.clear();
  collected_steps_ = 0;
}

}  // namespace zt
