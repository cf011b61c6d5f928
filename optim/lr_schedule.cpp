#include "optim/lr_schedule.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

#include "runtime/check.h"

namespace zt::optim {

namespace {

struct NamedKind {
  std::string_view name;
  ScheduleKind kind;
};
constexpr std::array<NamedKind, 4> kKinds{{{"linear", ScheduleKind::linear},
                                           {"cosine", ScheduleKind::cosine},
                                           {"constant", ScheduleKind::constant},
                                           {"constant_with_warmup", ScheduleKind::constant_with_warmup}}};

// HF's other SchedulerType values, so a valid HF name is told apart from a typo.
constexpr std::array<std::string_view, 8> kHfNotImplemented{
    "cosine_with_restarts", "polynomial",
    "inverse_sqrt",         "reduce_lr_on_plateau",
    "cosine_with_min_lr",   "cosine_warmup_with_min_lr",
    "warmup_stable_decay",  "greedy"};

double warmup_factor(int64_t step, int64_t warmup) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
}

}  // namespace

ScheduleKind parse_schedule_kind(std::string_view name) {
  for (const NamedKind& k : kKinds) {
    if (k.name == name) return k.kind;
  }
  for (std::string_view hf : kHfNotImplemented) {
    if (hf == name) ZT_FAIL("lr scheduler '", name, "' exists in HF but is not implemented here");
  }
  ZT_FAIL("unknown lr scheduler '", name, "' (expected linear, cosine, constant or constant_with_warmup)");
}

std::string_view schedule_kind_name(ScheduleKind kind) {
  for (const NamedKind& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  ZT_FAIL("invalid ScheduleKind ", static_cast<int>(kind));
}

void LrSchedule::validate() const {
  ZT_CHECK(base_lr >= 0, "learning rate must be non-negative, got ", base_lr);
  ZT_CHECK(num_warmup_steps >= 0, "num_warmup_steps must be non-negative, got ", num_warmup_steps);
  if (kind == ScheduleKind::linear || kind == ScheduleKind::cosine) {
    ZT_CHECK(num_training_steps >= 0, "num_training_steps must be non-negative, got ", num_training_steps);
  }
}

double LrSchedule::factor_at(int64_t step) const {
  ZT_CHECK(step >= 0, "lr schedule step must be non-negative, got ", step);
  const int64_t w = num_warmup_steps, t = num_training_steps;
  switch (kind) {
    case ScheduleKind::constant:
      return 1.0;
    case ScheduleKind::constant_with_warmup:
      return step < w ? warmup_factor(step, w) : 1.0;
    case ScheduleKind::linear:
      if (step < w) return warmup_factor(step, w);
      return std::max(0.0, static_cast<double>(t - step) / static_cast<double>(std::max<int64_t>(1, t - w)));
    case ScheduleKind::cosine: {
      if (step < w) return warmup_factor(step, w);
      const double progress =
          static_cast<double>(step - w) / static_cast<double>(std::max<int64_t>(1, t - w));
      constexpr double kCycles = 0.5;
      return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * kCycles * 2.0 * progress)));
    }
  }
  ZT_FAIL("invalid ScheduleKind ", static_cast<int>(kind));
}

double LrSchedule::lr_at(int64_t step) const {
  return base_lr * factor_at(step);
}

int64_t DeepSpeedSchedule::effective_warmup_steps() const {
  return warmup_num_steps == 0 ? 0 : std::max<int64_t>(2, warmup_num_steps);
}

double DeepSpeedSchedule::lr_at(int64_t optimizer_step, double optimizer_lr) const {
  ZT_CHECK(optimizer_step >= 0, "lr schedule step must be non-negative, got ", optimizer_step);
  // The rate DeepSpeed's scheduler sets when it is built (last_batch_iteration -1), used by the first step.
  if (optimizer_step == 0) return type == Type::warmup_cosine_lr ? 0.0 : warmup_min_lr;
  const int64_t step = optimizer_step - 1;  // the scheduler's last_batch_iteration
  const int64_t w = effective_warmup_steps();
  const double s = static_cast<double>(step), W = static_cast<double>(w),
               T = static_cast<double>(total_num_steps);
  // g(s), only for s < W (so W >= 2 and log(W) > 0).
  auto warmup_gamma = [&] { return warmup_log ? std::log(s + 1.0) / std::log(W) : s / W; };
  switch (type) {
    case Type::warmup_lr:
      if (step < w) return warmup_min_lr + (warmup_max_lr - warmup_min_lr) * warmup_gamma();
      return warmup_max_lr;
    case Type::warmup_decay_lr: {
      if (step < w) return warmup_min_lr + (warmup_max_lr - warmup_min_lr) * warmup_gamma();
      const double decay = std::max(0.0, (T - s) / std::max(1.0, T - W));
      return warmup_min_lr + (warmup_max_lr - warmup_min_lr) * decay;
    }
    case Type::warmup_cosine_lr: {
      if (step < w) return optimizer_lr * (warmup_min_ratio + (1.0 - warmup_min_ratio) * warmup_gamma());
      const double progress = std::min(1.0, (s - W + 1.0) / std::max(1.0, T - W));
      const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
      return optimizer_lr * std::max(0.0, cos_min_ratio + (1.0 - cos_min_ratio) * cosine);
    }
  }
  ZT_FAIL("invalid DeepSpeedSchedule type ", static_cast<int>(type));
}

}  // namespace zt::optim
