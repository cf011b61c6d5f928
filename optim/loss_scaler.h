// Loss scaling for fp16 training with DeepSpeed's semantics (deepspeed/runtime/fp16/loss_scaler.py,
// DynamicLossScaler, as used by ZeRO stages 1-3), configured by the "fp16" section of a DeepSpeed config:
//   "loss_scale" > 0      static scale: never changes; overflowing steps are still skipped and counted
//   "loss_scale" == 0     dynamic, starting at 2^"initial_scale_power" (default 16)
//   "loss_scale_window"   (1000) doubling after this many overflow-free steps since the last overflow
//   "hysteresis"          (2) overflows it takes to halve the scale (see below)
//   "consecutive_hysteresis" (false)
//   "min_loss_scale"      (1) floor of the halving
//
// update(overflow), called once per optimizer step after the overflow check on the scaled gradients,
// follows DeepSpeed's update_scale (cur_iter counts calls, starting at 0; last_overflow_iter starts at -1):
//   overflow:  if hysteresis == 1 or hysteresis_left == 1: scale = max(scale / 2, min)
//                (at min already: throws, as DeepSpeed's raise_error_at_min_scale=True does)
//              else hysteresis_left -= 1
//              last_overflow_iter = cur_iter; the step is skipped
//   clean:     if consecutive_hysteresis: hysteresis_left = hysteresis
//              stable = cur_iter - last_overflow_iter - 1  (clean steps before this one since the overflow)
//              if stable > 0 and stable % window == 0: scale *= 2 and hysteresis_left = hysteresis
//   cur_iter += 1
// So with the defaults (consecutive_hysteresis false) hysteresis_left is refilled only when the scale grows:
// the first overflow after a growth only uses up hysteresis, and every later one halves the scale until
// the next growth. The `stable` form is DeepSpeed's since v0.17.1 (June 2025, #6976); before that it was
// (cur_iter - last_overflow_iter) % window == 0, which grows one step earlier.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/dtype.h"

namespace zt::optim {

struct LossScalerConfig {
  double static_scale = 0;  // DeepSpeed "loss_scale": > 0 static, 0 dynamic
  int initial_scale_power = 16;
  int64_t scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_scale = 1;
  bool raise_error_at_min_scale = true;  // DeepSpeed: overflow while already at min_scale ends the run
};

// Everything a checkpoint needs to resume the scaler exactly.
struct LossScalerState {
  double scale = 1;
  int64_t iteration = 0;  // DeepSpeed cur_iter: update() calls so far
  int64_t last_overflow_iteration = -1;
  int hysteresis_left = 1;  // DeepSpeed cur_hysteresis
  int64_t skipped_steps = 0;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig config = {});  // throws on invalid settings

  // No scaling at all (bf16 / fp32 training): scale 1, never skips for a finite step.
  static LossScaler disabled();

  double scale() const { return state_.scale; }
  bool dynamic() const { return dynamic_; }

  // Records the outcome of one step; returns true when the step should be applied (no overflow).
  bool update(bool overflow);

  int64_t skipped_steps() const { return state_.skipped_steps; }
  int64_t iteration() const { return state_.iteration; }
  int hysteresis_left() const { return state_.hysteresis_left; }
  const LossScalerConfig& config() const { return config_; }

  const LossScalerState& state() const { return state_; }
  void load_state(const LossScalerState& state);

 private:
  LossScalerConfig config_;
  bool dynamic_;
  LossScalerState state_;
};

// Overflow detection: true when any element is +-inf or NaN. Bit tests, so it vectorises and cannot be
// fooled by compiler assumptions about finiteness. num_threads 0: all hardware threads.
bool has_inf_or_nan(std::span<const float> values, int num_threads = 0);
bool has_inf_or_nan(std::span<const bf16> values);
bool has_inf_or_nan(std::span<const f16> values);

// What went wrong, for the message when a step overflows: counts and the first bad index (-1 if none).
struct NonFiniteReport {
  int64_t inf_count = 0;
  int64_t nan_count = 0;
  int64_t first_index = -1;
};
NonFiniteReport find_non_finite(std::span<const float> values);

}  // namespace zt::optim
