#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "runtime/check.h"

namespace zt::optim {

LossScaler::LossScaler(LossScalerConfig config) : config_(config), dynamic_(config.static_scale == 0) {
  ZT_CHECK(config_.static_scale >= 0 && std::isfinite(config_.static_scale),
           "fp16.loss_scale must be 0 (dynamic) or a positive finite value, got ", config_.static_scale);
  if (dynamic_) {
    ZT_CHECK(config_.initial_scale_power >= 0 && config_.initial_scale_power <= 64,
             "fp16.initial_scale_power must be in [0, 64], got ", config_.initial_scale_power);
    ZT_CHECK(config_.scale_window >= 1, "fp16.loss_scale_window must be >= 1, got ", config_.scale_window);
    ZT_CHECK(config_.hysteresis >= 1, "fp16.hysteresis must be >= 1, got ", config_.hysteresis);
    ZT_CHECK(config_.min_scale > 0 && std::isfinite(config_.min_scale),
             "fp16.min_loss_scale must be positive and finite, got ", config_.min_scale);
    state_.scale = std::ldexp(1.0, config_.initial_scale_power);
  } else {
    state_.scale = config_.static_scale;
  }
  state_.hysteresis_left = config_.hysteresis;
}

LossScaler LossScaler::disabled() {
  LossScalerConfig config;
  config.static_scale = 1;
  return LossScaler(config);
}

bool LossScaler::update(bool overflow) {
  LossScalerState& s = state_;
  if (overflow) {
    if (dynamic_) {
      if (config_.hysteresis == 1 || s.hysteresis_left == 1) {
        if (s.scale == config_.min_scale && config_.raise_error_at_min_scale) {
          ZT_FAIL("gradient overflow at iteration ", s.iteration,
                  " with the loss scale already at its minimum (", s.scale,
                  "); cannot decrease it further. Training in bf16, or a lower learning rate, avoids "
                  "this; fp16.min_loss_scale sets the floor");
        }
        s.scale = std::max(s.scale / 2, config_.min_scale);
      } else {
        --s.hysteresis_left;
      }
      s.last_overflow_iteration = s.iteration;
    }
  } else if (dynamic_) {
    if (config_.consecutive_hysteresis) s.hysteresis_left = config_.hysteresis;
    const int64_t stable_steps = s.iteration - s.last_overflow_iteration - 1;
    if (stable_steps > 0 && stable_steps % config_.scale_window == 0) {
      if (!config_.consecutive_hysteresis) s.hysteresis_left = config_.hysteresis;
      s.scale *= 2;
    }
  }
  if (overflow) ++s.skipped_steps;
  ++s.iteration;
  return !overflow;
}

void LossScaler::load_state(const LossScalerState& state) {
  ZT_CHECK(state.scale > 0 && std::isfinite(state.scale), "loss scaler state: invalid scale ", state.scale);
  ZT_CHECK(state.iteration >= 0 && state.last_overflow_iteration >= -1 &&
               state.last_overflow_iteration < state.iteration,
           "loss scaler state: invalid iterations (", state.iteration, ", last overflow ",
           state.last_overflow_iteration, ")");
  ZT_CHECK(state.hysteresis_left >= 1 && state.hysteresis_left <= config_.hysteresis,
           "loss scaler state: hysteresis_left ", state.hysteresis_left, " outside [1, ", config_.hysteresis,
           "]");
  ZT_CHECK(state.skipped_steps >= 0 && state.skipped_steps <= state.iteration,
           "loss scaler state: invalid skipped_steps ", state.skipped_steps);
  state_ = state;
}

}  // namespace zt::optim
