// Learning-rate schedules with HuggingFace `transformers.get_scheduler` semantics (a LambdaLR: the learning
// rate of step s is base_lr * factor(s), s = scheduler steps taken so far, starting at 0 for the first
// optimizer step). W = num_warmup_steps, T = num_training_steps:
//   linear                s < W: s / max(1, W)   else max(0, (T - s) / max(1, T - W))
//   cosine                s < W: s / max(1, W)   else max(0, 0.5 * (1 + cos(pi * 2 * cycles * progress))),
//                         progress = (s - W) / max(1, T - W), cycles = 0.5 (HF's default: half a wave to 0)
//   constant              1
//   constant_with_warmup  s < W: s / max(1, W)   else 1
// Factors are computed in double, as Python does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zt::optim {

enum class ScheduleKind { linear, cosine, constant, constant_with_warmup };

// The name as HF spells it ("linear", "cosine", "constant", "constant_with_warmup"); throws for any other,
// naming HF schedules that exist but are not implemented here apart from unknown names.
ScheduleKind parse_schedule_kind(std::string_view name);
std::string_view schedule_kind_name(ScheduleKind kind);

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::linear;
  double base_lr = 0;              // the optimizer's lr (HF --learning_rate)
  int64_t num_warmup_steps = 0;    // W >= 0
  int64_t num_training_steps = 0;  // T, used by linear and cosine

  // Throws when W < 0, base_lr < 0, or T < 0 for linear/cosine.
  void validate() const;
  // base_lr * factor(step), for step >= 0.
  double lr_at(int64_t step) const;
  double factor_at(int64_t step) const;
};

// A DeepSpeed "scheduler" section (DeepSpeed's runtime/lr_schedules.py). When present it replaces HF's
// schedule (as Accelerate's DummyScheduler does). DeepSpeed sets the rate when the scheduler is built
// (warmup_min_lr, or 0 for WarmupCosineLR) and steps it after each optimizer step, so optimizer step k >= 1
// (0-based) runs at the rate of s = k - 1 below, the first at the built rate. w =
// warmup_num_steps, W = max(2, w) (DeepSpeed warms up over at least 2 steps; w = 0, only reachable from
// "auto" and --num_warmup_steps 0, means no warmup: W = 0), T = total_num_steps, g(s) = log(s+1)/log(W)
// (warmup_type log) or s/W (linear):
//   WarmupLR        s < W: min + (max - min) * g(s)                  else max
//   WarmupDecayLR   s < W: min + (max - min) * g(s)                  else min + (max - min) * d(s),
//                   d(s) = max(0, (T - s) / max(1, T - W))           (linear from max down to min at s = T)
//   WarmupCosineLR  s < W: lr * (r0 + (1 - r0) * g(s))               else lr * max(0, c + (1 - c) * k(s)),
//                   k(s) = (1 + cos(pi * min(1, (s - W + 1) / max(1, T - W)))) / 2,
//                   r0 = warmup_min_ratio, c = cos_min_ratio, lr = the optimizer's learning rate
struct DeepSpeedSchedule {
  enum class Type { warmup_lr, warmup_decay_lr, warmup_cosine_lr };
  Type type = Type::warmup_lr;
  double warmup_min_lr = 0;      // WarmupLR/WarmupDecayLR
  double warmup_max_lr = 0.001;  // WarmupLR/WarmupDecayLR
  int64_t warmup_num_steps = 1000;
  int64_t total_num_steps = 0;    // WarmupDecayLR/WarmupCosineLR
  bool warmup_log = true;         // warmup_type "log" (DeepSpeed's default) or "linear"
  double warmup_min_ratio = 0;    // WarmupCosineLR
  double cos_min_ratio = 0.0001;  // WarmupCosineLR

  // W above: the steps the warmup lasts.
  int64_t effective_warmup_steps() const;
  // The learning rate of the optimizer step after `optimizer_step` steps (>= 0); `optimizer_lr` is the
  // optimizer's own rate, which WarmupCosineLR scales.
  double lr_at(int64_t optimizer_step, double optimizer_lr) const;
};

}  // namespace zt::optim
