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

}  // namespace zt::optim
